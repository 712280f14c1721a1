package blkprof.ycsb;

import com.datastax.oss.driver.api.core.ConsistencyLevel;
import com.datastax.oss.driver.api.core.CqlSession;
import com.datastax.oss.driver.api.core.DefaultConsistencyLevel;
import com.datastax.oss.driver.api.core.DriverException;
import com.datastax.oss.driver.api.core.config.DefaultDriverOption;
import com.datastax.oss.driver.api.core.config.DriverConfigLoader;
import com.datastax.oss.driver.api.core.cql.BoundStatement;
import com.datastax.oss.driver.api.core.cql.ColumnDefinition;
import com.datastax.oss.driver.api.core.cql.PreparedStatement;
import com.datastax.oss.driver.api.core.cql.ResultSet;
import com.datastax.oss.driver.api.core.cql.Row;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.Vector;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import site.ycsb.ByteIterator;
import site.ycsb.DB;
import site.ycsb.DBException;
import site.ycsb.Status;
import site.ycsb.StringByteIterator;

/**
 * A YCSB binding for Cassandra over CQL (DataStax Java driver 4). YCSB makes one instance per
 * client thread; they share one session and one cache of prepared statements.
 *
 * <p>Properties: {@code cql.host} (127.0.0.1), {@code cql.port} (9042), {@code cql.datacenter}
 * (datacenter1), {@code cql.keyspace} (ycsb), {@code table} (usertable, YCSB's own),
 * {@code cql.consistency} (ONE), {@code cql.timeout_ms} (10000), {@code cql.create_schema}
 * (false: true creates the keyspace and table if missing), {@code cql.replication_factor} (1),
 * and YCSB's {@code fieldcount} and {@code fieldnameprefix} for the schema.
 */
public class CqlDb extends DB {
  private static final Object LOCK = new Object();
  private static CqlSession session;
  private static int users;
  private static final Map<String, PreparedStatement> PREPARED = new ConcurrentHashMap<>();

  private String keyspace;
  private ConsistencyLevel consistency;

  @Override
  public void init() throws DBException {
    Properties p = getProperties();
    keyspace = CqlStatements.ident(p.getProperty("cql.keyspace", "ycsb"));
    try {
      consistency = DefaultConsistencyLevel.valueOf(p.getProperty("cql.consistency", "ONE"));
    } catch (IllegalArgumentException e) {
      throw new DBException("cql.consistency: not a consistency level: "
          + p.getProperty("cql.consistency"));
    }
    synchronized (LOCK) {
      if (session == null) {
        session = connect(p);
        if (Boolean.parseBoolean(p.getProperty("cql.create_schema", "false"))) {
          createSchema(session, p);
        }
      }
      users++;
    }
  }

  static CqlSession connect(Properties p) throws DBException {
    String host = p.getProperty("cql.host", "127.0.0.1");
    int port;
    long timeoutMs;
    try {
      port = Integer.parseInt(p.getProperty("cql.port", "9042"));
      timeoutMs = Long.parseLong(p.getProperty("cql.timeout_ms", "10000"));
    } catch (NumberFormatException e) {
      throw new DBException("cql.port and cql.timeout_ms must be numbers: " + e.getMessage());
    }
    DriverConfigLoader config = DriverConfigLoader.programmaticBuilder()
        .withDuration(DefaultDriverOption.REQUEST_TIMEOUT, Duration.ofMillis(timeoutMs))
        // A slow node (an emulated CPU) gets the longer of these and cql.timeout_ms.
        .withDuration(DefaultDriverOption.CONNECTION_INIT_QUERY_TIMEOUT,
            Duration.ofMillis(Math.max(10_000, timeoutMs)))
        .withDuration(DefaultDriverOption.METADATA_SCHEMA_REQUEST_TIMEOUT,
            Duration.ofMillis(Math.max(30_000, timeoutMs)))
        .withDuration(DefaultDriverOption.CONTROL_CONNECTION_AGREEMENT_TIMEOUT,
            Duration.ofMillis(Math.max(30_000, timeoutMs)))
        .build();
    try {
      return CqlSession.builder()
          .addContactPoint(new InetSocketAddress(host, port))
          .withLocalDatacenter(p.getProperty("cql.datacenter", "datacenter1"))
          .withConfigLoader(config)
          .build();
    } catch (DriverException e) {
      throw new DBException("cannot connect to Cassandra at " + host + ":" + port + ": "
          + e.getMessage(), e);
    }
  }

  static List<String> fieldNames(Properties p) throws DBException {
    int count;
    try {
      count = Integer.parseInt(p.getProperty("fieldcount", "10"));
    } catch (NumberFormatException e) {
      throw new DBException("fieldcount must be a number: " + p.getProperty("fieldcount"));
    }
    String prefix = p.getProperty("fieldnameprefix", "field");
    List<String> fields = new ArrayList<>();
    for (int i = 0; i < count; i++) {
      fields.add(prefix + i);
    }
    return fields;
  }

  static void createSchema(CqlSession s, Properties p) throws DBException {
    String ks = CqlStatements.ident(p.getProperty("cql.keyspace", "ycsb"));
    String table = CqlStatements.ident(p.getProperty("table", "usertable"));
    int rf = Integer.parseInt(p.getProperty("cql.replication_factor", "1"));
    s.execute(CqlStatements.createKeyspace(ks, rf));
    s.execute(CqlStatements.createTable(ks, table, fieldNames(p)));
  }

  @Override
  public void cleanup() throws DBException {
    synchronized (LOCK) {
      users--;
      if (users == 0 && session != null) {
        session.close();
        session = null;
        PREPARED.clear();
      }
    }
  }

  private PreparedStatement prepare(String cql) {
    return PREPARED.computeIfAbsent(cql, session::prepare);
  }

  private BoundStatement bind(PreparedStatement ps, Object... values) {
    return ps.bind(values).setConsistencyLevel(consistency);
  }

  private static Set<String> sorted(Set<String> fields) {
    return fields == null ? null : new TreeSet<>(fields);
  }

  private static HashMap<String, ByteIterator> rowToMap(Row row) {
    HashMap<String, ByteIterator> m = new HashMap<>();
    for (ColumnDefinition c : row.getColumnDefinitions()) {
      String name = c.getName().asInternal();
      if (name.equals(CqlStatements.KEY)) {
        continue;
      }
      String v = row.getString(c.getName());
      if (v != null) {
        m.put(name, new StringByteIterator(v));
      }
    }
    return m;
  }

  @Override
  public Status read(String table, String key, Set<String> fields,
      Map<String, ByteIterator> result) {
    try {
      PreparedStatement ps = prepare(CqlStatements.read(keyspace, table, sorted(fields)));
      Row row = session.execute(bind(ps, key)).one();
      if (row == null) {
        return Status.NOT_FOUND;
      }
      result.putAll(rowToMap(row));
      return Status.OK;
    } catch (DriverException | IllegalArgumentException e) {
      return error("read", e);
    }
  }

  @Override
  public Status scan(String table, String startkey, int recordcount, Set<String> fields,
      Vector<HashMap<String, ByteIterator>> result) {
    try {
      PreparedStatement ps = prepare(CqlStatements.scan(keyspace, table, sorted(fields)));
      ResultSet rs = session.execute(bind(ps, startkey, recordcount));
      for (Row row : rs) {
        result.add(rowToMap(row));
      }
      return Status.OK;
    } catch (DriverException | IllegalArgumentException e) {
      return error("scan", e);
    }
  }

  @Override
  public Status update(String table, String key, Map<String, ByteIterator> values) {
    return upsert("update", table, key, values);
  }

  @Override
  public Status insert(String table, String key, Map<String, ByteIterator> values) {
    return upsert("insert", table, key, values);
  }

  private Status upsert(String what, String table, String key, Map<String, ByteIterator> values) {
    try {
      List<String> fields = new ArrayList<>(new TreeSet<>(values.keySet()));
      PreparedStatement ps = prepare(CqlStatements.upsert(keyspace, table, fields));
      Object[] args = new Object[fields.size() + 1];
      for (int i = 0; i < fields.size(); i++) {
        args[i] = values.get(fields.get(i)).toString();
      }
      args[fields.size()] = key;
      session.execute(bind(ps, args));
      return Status.OK;
    } catch (DriverException | IllegalArgumentException e) {
      return error(what, e);
    }
  }

  @Override
  public Status delete(String table, String key) {
    try {
      session.execute(bind(prepare(CqlStatements.delete(keyspace, table)), key));
      return Status.OK;
    } catch (DriverException | IllegalArgumentException e) {
      return error("delete", e);
    }
  }

  private static final AtomicLong ERRORS = new AtomicLong();

  private static Status error(String what, Exception e) {
    // YCSB counts the failure per operation; say why once in a while, not per op.
    if (ERRORS.incrementAndGet() <= 10) {
      System.err.println("cql " + what + " failed: " + e);
    }
    return Status.ERROR;
  }
}
