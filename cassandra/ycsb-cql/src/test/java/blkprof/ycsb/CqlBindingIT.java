package blkprof.ycsb;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertTrue;

import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.Vector;
import org.junit.AfterClass;
import org.junit.BeforeClass;
import org.junit.Test;
import site.ycsb.ByteIterator;
import site.ycsb.Status;
import site.ycsb.StringByteIterator;

/**
 * The binding against a live node: {@code -Dcql.host=HOST -Dcql.port=PORT}. `cargo xtask
 * cassandra` runs it once the node answers CQL, in a keyspace of its own. Without a host it
 * fails: a test that quietly skips proves nothing.
 */
public class CqlBindingIT {
  private static CqlDb db;
  private static final String TABLE = "usertable";

  @BeforeClass
  public static void connect() throws Exception {
    String host = System.getProperty("cql.host");
    assertNotNull("set -Dcql.host (and -Dcql.port) to a live Cassandra node", host);
    Properties p = new Properties();
    p.setProperty("cql.host", host);
    p.setProperty("cql.port", System.getProperty("cql.port", "9042"));
    p.setProperty("cql.timeout_ms", System.getProperty("cql.timeout_ms", "10000"));
    p.setProperty("cql.keyspace", "blkprof_binding_test");
    p.setProperty("cql.create_schema", "true");
    p.setProperty("fieldcount", "3");
    db = new CqlDb();
    db.setProperties(p);
    db.init();
  }

  @AfterClass
  public static void close() throws Exception {
    if (db != null) {
      db.cleanup();
    }
  }

  private static Map<String, ByteIterator> values(String... kv) {
    Map<String, ByteIterator> m = new HashMap<>();
    for (int i = 0; i < kv.length; i += 2) {
      m.put(kv[i], new StringByteIterator(kv[i + 1]));
    }
    return m;
  }

  private static Map<String, String> strings(Map<String, ByteIterator> m) {
    Map<String, String> s = new HashMap<>();
    m.forEach((k, v) -> s.put(k, v.toString()));
    return s;
  }

  @Test
  public void insertReadUpdateDelete() {
    assertEquals(Status.OK,
        db.insert(TABLE, "user1", values("field0", "a", "field1", "b", "field2", "c")));
    Map<String, ByteIterator> got = new HashMap<>();
    assertEquals(Status.OK, db.read(TABLE, "user1", null, got));
    assertEquals(Map.of("field0", "a", "field1", "b", "field2", "c"), strings(got));

    assertEquals(Status.OK, db.update(TABLE, "user1", values("field1", "B")));
    got.clear();
    assertEquals(Status.OK, db.read(TABLE, "user1", Set.of("field1", "field2"), got));
    assertEquals(Map.of("field1", "B", "field2", "c"), strings(got));

    assertEquals(Status.OK, db.delete(TABLE, "user1"));
    assertEquals(Status.NOT_FOUND, db.read(TABLE, "user1", null, new HashMap<>()));
  }

  @Test
  public void scanReturnsAtMostTheLimit() {
    for (int i = 0; i < 20; i++) {
      assertEquals(Status.OK, db.insert(TABLE, "scan" + i, values("field0", "v" + i)));
    }
    Vector<HashMap<String, ByteIterator>> rows = new Vector<>();
    assertEquals(Status.OK, db.scan(TABLE, "scan0", 5, Set.of("field0"), rows));
    assertTrue("got " + rows.size(), rows.size() >= 1 && rows.size() <= 5);
    for (HashMap<String, ByteIterator> r : rows) {
      assertEquals(Set.of("field0"), r.keySet());
    }
  }
}
