package trib.udfs;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.hive.ql.exec.Description;
import org.apache.hadoop.hive.ql.exec.MapredContext;
import org.apache.hadoop.hive.ql.exec.UDFArgumentException;
import org.apache.hadoop.hive.ql.udf.generic.GenericUDF;
import org.apache.hadoop.hive.serde2.objectinspector.ObjectInspector;
import org.apache.hadoop.hive.serde2.objectinspector.PrimitiveObjectInspector;
import org.apache.hadoop.hive.serde2.objectinspector.primitive.PrimitiveObjectInspectorFactory;
import org.apache.hadoop.io.LongWritable;

/**
 * {@code trib_file_mtime_ms(path)}: a file's modification time, i.e. when it arrived; with
 * {@code input_file_name()} (Spark) or {@code INPUT__FILE__NAME} (Hive) the arrival time of a row.
 * Rows of one file come together, so a small cache makes it one stat per file, not per row.
 * A path that does not exist is an error, not NULL: a silent NULL would hide a wrong argument.
 */
@Description(name = "trib_file_mtime_ms",
    value = "_FUNC_(path) - the file's modification time in epoch ms (its arrival time)")
public final class FileMtimeUDF extends GenericUDF {
  private static final String FN = "trib_file_mtime_ms";
  private static final int CACHE = 1024;
  private transient PrimitiveObjectInspector in;
  private transient Configuration conf;
  private transient LongWritable out;
  private transient Map<String, Long> cache;

  @Override
  public void configure(MapredContext context) {
    conf = context.getJobConf();
  }

  @Override
  public ObjectInspector initialize(ObjectInspector[] args) throws UDFArgumentException {
    Args.count(FN, args, 1, 1, "(path)");
    in = Args.primitive(FN, args, 0, "path");
    cache = new LinkedHashMap<String, Long>(64, 0.75f, true) {
      @Override
      protected boolean removeEldestEntry(Map.Entry<String, Long> eldest) {
        return size() > CACHE;
      }
    };
    out = new LongWritable();
    return PrimitiveObjectInspectorFactory.writableLongObjectInspector;
  }

  @Override
  public Object evaluate(DeferredObject[] args) throws org.apache.hadoop.hive.ql.metadata.HiveException {
    String path = Args.string(args[0].get(), in);
    if (path == null || path.isEmpty()) {
      return null;
    }
    Long mtime = cache.get(path);
    if (mtime == null) {
      if (conf == null) {
        conf = new Configuration();
      }
      try {
        Path p = new Path(path);
        mtime = p.getFileSystem(conf).getFileStatus(p).getModificationTime();
      } catch (FileNotFoundException e) {
        throw new IllegalArgumentException(FN + ": no such file " + path);
      } catch (IOException e) {
        throw new UncheckedIOException(FN + ": cannot stat " + path, e);
      }
      cache.put(path, mtime);
    }
    out.set(mtime);
    return out;
  }

  @Override
  public String getDisplayString(String[] children) {
    return FN + "(" + String.join(", ", children) + ")";
  }
}
