package trib.udfs;

import java.time.ZoneId;
import java.time.format.DateTimeFormatter;
import org.apache.hadoop.hive.ql.exec.Description;
import org.apache.hadoop.hive.ql.exec.UDFArgumentException;
import org.apache.hadoop.hive.ql.udf.generic.GenericUDF;
import org.apache.hadoop.hive.serde2.objectinspector.ObjectInspector;
import org.apache.hadoop.hive.serde2.objectinspector.PrimitiveObjectInspector;
import org.apache.hadoop.hive.serde2.objectinspector.primitive.PrimitiveObjectInspectorFactory;
import org.apache.hadoop.io.Text;

/** {@code trib_partition_value(event, pattern[, tz])}: the partition value an event time falls in. */
@Description(name = "trib_partition_value",
    value = "_FUNC_(event, pattern[, tz]) - the partition value (e.g. pattern 'yyyyMMddHH') of an "
        + "event time (BIGINT epoch ms, TIMESTAMP or ISO-8601 string) in zone tz (default UTC)")
public final class PartitionValueUDF extends GenericUDF {
  private static final String FN = "trib_partition_value";
  private transient PrimitiveObjectInspector[] in;
  private transient String lastPattern;
  private transient String lastZone;
  private transient DateTimeFormatter formatter;
  private transient Text out;

  @Override
  public ObjectInspector initialize(ObjectInspector[] args) throws UDFArgumentException {
    Args.count(FN, args, 2, 3, "(event, pattern[, tz])");
    in = new PrimitiveObjectInspector[args.length];
    String[] names = {"event", "pattern", "tz"};
    for (int i = 0; i < args.length; i++) {
      in[i] = Args.primitive(FN, args, i, names[i]);
    }
    out = new Text();
    return PrimitiveObjectInspectorFactory.writableStringObjectInspector;
  }

  @Override
  public Object evaluate(DeferredObject[] args) throws org.apache.hadoop.hive.ql.metadata.HiveException {
    Long ms = Args.millis(FN, args[0].get(), in[0]);
    String pattern = Args.string(args[1].get(), in[1]);
    String tz = args.length > 2 ? Args.string(args[2].get(), in[2]) : "UTC";
    if (ms == null || pattern == null || tz == null) {
      return null;
    }
    if (!pattern.equals(lastPattern) || !tz.equals(lastZone)) {
      ZoneId zone = Args.zone(FN, tz);
      try {
        formatter = DateTimeFormatter.ofPattern(pattern).withZone(zone);
      } catch (IllegalArgumentException e) {
        throw new IllegalArgumentException(FN + ": bad pattern " + pattern + ": " + e.getMessage());
      }
      lastPattern = pattern;
      lastZone = tz;
    }
    try {
      out.set(TimeSpec.partitionValue(formatter, ms, formatter.getZone(), pattern));
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException(FN + ": " + e.getMessage());
    }
    return out;
  }

  @Override
  public String getDisplayString(String[] children) {
    return FN + "(" + String.join(", ", children) + ")";
  }
}
