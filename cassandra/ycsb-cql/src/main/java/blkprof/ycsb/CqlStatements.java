package blkprof.ycsb;

import java.util.Collection;
import java.util.List;
import java.util.regex.Pattern;
import java.util.stream.Collectors;

/** The CQL text the binding prepares: pure functions, tested without a node. */
final class CqlStatements {
  private static final Pattern IDENT = Pattern.compile("[A-Za-z][A-Za-z0-9_]{0,47}");

  /** The YCSB key column: the name YCSB's own Cassandra binding used. */
  static final String KEY = "y_id";

  private CqlStatements() {}

  /** A keyspace, table or column name, refused unless it needs no quoting. */
  static String ident(String name) {
    if (name == null || !IDENT.matcher(name).matches()) {
      throw new IllegalArgumentException(
          "'" + name + "' is not a plain CQL identifier (a letter, then letters, digits or _)");
    }
    return name;
  }

  static String createKeyspace(String keyspace, int replicationFactor) {
    return "CREATE KEYSPACE IF NOT EXISTS " + ident(keyspace)
        + " WITH replication = {'class': 'SimpleStrategy', 'replication_factor': "
        + replicationFactor + "}";
  }

  static String createTable(String keyspace, String table, List<String> fields) {
    String columns = fields.stream().map(f -> ident(f) + " text").collect(Collectors.joining(", "));
    return "CREATE TABLE IF NOT EXISTS " + ident(keyspace) + "." + ident(table) + " (" + KEY
        + " text PRIMARY KEY, " + columns + ")";
  }

  private static String selection(Collection<String> fields) {
    if (fields == null) {
      return "*";
    }
    return fields.stream().map(CqlStatements::ident).collect(Collectors.joining(", "));
  }

  static String read(String keyspace, String table, Collection<String> fields) {
    return "SELECT " + selection(fields) + " FROM " + ident(keyspace) + "." + ident(table)
        + " WHERE " + KEY + " = ?";
  }

  static String scan(String keyspace, String table, Collection<String> fields) {
    return "SELECT " + selection(fields) + " FROM " + ident(keyspace) + "." + ident(table)
        + " WHERE token(" + KEY + ") >= token(?) LIMIT ?";
  }

  /** INSERT and UPDATE are the same upsert in CQL: the columns in the given order, then the key. */
  static String upsert(String keyspace, String table, List<String> fields) {
    if (fields.isEmpty()) {
      throw new IllegalArgumentException("an insert or update needs at least one field");
    }
    String cols = fields.stream().map(CqlStatements::ident).collect(Collectors.joining(", "));
    String marks = fields.stream().map(f -> "?").collect(Collectors.joining(", "));
    return "INSERT INTO " + ident(keyspace) + "." + ident(table) + " (" + cols + ", " + KEY
        + ") VALUES (" + marks + ", ?)";
  }

  static String delete(String keyspace, String table) {
    return "DELETE FROM " + ident(keyspace) + "." + ident(table) + " WHERE " + KEY + " = ?";
  }
}
