package blkprof.ycsb;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertThrows;

import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import org.junit.Test;

public class CqlStatementsTest {
  @Test
  public void readsAllOrSomeFields() {
    assertEquals("SELECT * FROM ycsb.usertable WHERE y_id = ?",
        CqlStatements.read("ycsb", "usertable", null));
    assertEquals("SELECT field1, field7 FROM ycsb.usertable WHERE y_id = ?",
        CqlStatements.read("ycsb", "usertable", new TreeSet<>(Set.of("field7", "field1"))));
  }

  @Test
  public void scansFromTheKeysToken() {
    assertEquals("SELECT * FROM ycsb.usertable WHERE token(y_id) >= token(?) LIMIT ?",
        CqlStatements.scan("ycsb", "usertable", null));
  }

  @Test
  public void upsertBindsFieldsThenKey() {
    assertEquals("INSERT INTO ks.t (field0, field3, y_id) VALUES (?, ?, ?)",
        CqlStatements.upsert("ks", "t", List.of("field0", "field3")));
    assertThrows(IllegalArgumentException.class, () -> CqlStatements.upsert("ks", "t", List.of()));
  }

  @Test
  public void schemaHasTheYcsbShape() {
    assertEquals("CREATE TABLE IF NOT EXISTS ycsb.usertable (y_id text PRIMARY KEY, "
        + "field0 text, field1 text)",
        CqlStatements.createTable("ycsb", "usertable", List.of("field0", "field1")));
    assertEquals("CREATE KEYSPACE IF NOT EXISTS ycsb WITH replication = "
        + "{'class': 'SimpleStrategy', 'replication_factor': 1}",
        CqlStatements.createKeyspace("ycsb", 1));
  }

  @Test
  public void refusesNamesThatWouldNeedQuoting() {
    for (String bad : new String[] {"", "1abc", "a b", "x;DROP", "\"q\"", null}) {
      assertThrows(IllegalArgumentException.class, () -> CqlStatements.ident(bad));
    }
    assertEquals("field_9", CqlStatements.ident("field_9"));
  }
}
