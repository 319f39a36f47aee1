package pmhash.ycsb;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.Vector;
import redis.clients.jedis.Jedis;
import site.ycsb.ByteArrayByteIterator;
import site.ycsb.ByteIterator;
import site.ycsb.DB;
import site.ycsb.DBException;
import site.ycsb.Status;

/**
 * YCSB's DB interface over `pmhash serve`, through Jedis (one connection per YCSB thread).
 *
 * <p>The server has no hash type, so a record's fields travel as one value: for each
 * field, its name and its bytes, each preceded by its length (4 bytes, big-endian). With
 * writeallfields=true (as scripts/ycsb.sh runs) an update carries every field and is one
 * SET; a partial update reads the record, merges and writes it back (two round trips, not
 * atomic). Scans (workload E) are not supported by a hash index: NOT_IMPLEMENTED.
 *
 * <p>Properties: pmhash.host (default 127.0.0.1), pmhash.port (default 6379).
 */
public class PmhashClient extends DB {
  private Jedis jedis;
  private boolean writeAllFields;

  @Override
  public void init() throws DBException {
    String host = getProperties().getProperty("pmhash.host", "127.0.0.1");
    int port = Integer.parseInt(getProperties().getProperty("pmhash.port", "6379"));
    writeAllFields = Boolean.parseBoolean(getProperties().getProperty("writeallfields", "false"));
    try {
      jedis = new Jedis(host, port);
      jedis.connect();
    } catch (RuntimeException e) {
      throw new DBException("cannot connect to pmhash serve at " + host + ":" + port, e);
    }
  }

  @Override
  public void cleanup() throws DBException {
    if (jedis != null) {
      jedis.close();
    }
  }

  static byte[] encode(Map<String, ByteIterator> values) {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    for (Map.Entry<String, ByteIterator> e : values.entrySet()) {
      byte[] name = e.getKey().getBytes(StandardCharsets.UTF_8);
      byte[] value = e.getValue().toArray();
      out.writeBytes(ByteBuffer.allocate(4).putInt(name.length).array());
      out.writeBytes(name);
      out.writeBytes(ByteBuffer.allocate(4).putInt(value.length).array());
      out.writeBytes(value);
    }
    return out.toByteArray();
  }

  static Map<String, byte[]> decode(byte[] record) {
    Map<String, byte[]> fields = new HashMap<>();
    ByteBuffer in = ByteBuffer.wrap(record);
    while (in.remaining() >= 4) {
      byte[] name = new byte[in.getInt()];
      in.get(name);
      byte[] value = new byte[in.getInt()];
      in.get(value);
      fields.put(new String(name, StandardCharsets.UTF_8), value);
    }
    return fields;
  }

  private static byte[] key(String key) {
    return key.getBytes(StandardCharsets.UTF_8);
  }

  @Override
  public Status read(String table, String key, Set<String> fields,
                     Map<String, ByteIterator> result) {
    try {
      byte[] record = jedis.get(key(key));
      if (record == null) {
        return Status.NOT_FOUND;
      }
      for (Map.Entry<String, byte[]> f : decode(record).entrySet()) {
        if (fields == null || fields.contains(f.getKey())) {
          result.put(f.getKey(), new ByteArrayByteIterator(f.getValue()));
        }
      }
      return Status.OK;
    } catch (RuntimeException e) {
      return Status.ERROR;
    }
  }

  @Override
  public Status scan(String table, String startkey, int recordcount, Set<String> fields,
                     Vector<HashMap<String, ByteIterator>> result) {
    return Status.NOT_IMPLEMENTED;  // a hash index has no key order
  }

  @Override
  public Status update(String table, String key, Map<String, ByteIterator> values) {
    try {
      if (writeAllFields) {  // every field: the record is replaced, one SET
        return "OK".equals(jedis.set(key(key), encode(values))) ? Status.OK : Status.ERROR;
      }
      byte[] record = jedis.get(key(key));
      if (record == null) {
        return Status.NOT_FOUND;
      }
      Map<String, byte[]> merged = decode(record);
      Map<String, ByteIterator> all = new HashMap<>();
      for (Map.Entry<String, byte[]> f : merged.entrySet()) {
        all.put(f.getKey(), new ByteArrayByteIterator(f.getValue()));
      }
      all.putAll(values);
      return "OK".equals(jedis.set(key(key), encode(all))) ? Status.OK : Status.ERROR;
    } catch (RuntimeException e) {
      return Status.ERROR;
    }
  }

  @Override
  public Status insert(String table, String key, Map<String, ByteIterator> values) {
    try {
      return "OK".equals(jedis.set(key(key), encode(values))) ? Status.OK : Status.ERROR;
    } catch (RuntimeException e) {
      return Status.ERROR;
    }
  }

  @Override
  public Status delete(String table, String key) {
    try {
      return jedis.del(key(key)) == 1 ? Status.OK : Status.NOT_FOUND;
    } catch (RuntimeException e) {
      return Status.ERROR;
    }
  }
}
