package trib.udfs;

import java.time.ZoneId;
import org.apache.hadoop.hive.ql.exec.UDFArgumentException;
import org.apache.hadoop.hive.ql.udf.generic.GenericUDF;
import org.apache.hadoop.hive.serde2.objectinspector.ObjectInspector;
import org.apache.hadoop.hive.serde2.objectinspector.PrimitiveObjectInspector;
import org.apache.hadoop.hive.serde2.objectinspector.primitive.PrimitiveObjectInspectorFactory;
import org.apache.hadoop.io.LongWritable;

/**
 * The closed window a run scheduled at {@code schedule} reads, aligned to the wall clock of
 * {@code tz}: the last whole period ending by {@code schedule - lag}, Python's {@code Schedule.window}
 * (aligned form; {@link PeriodClock#scheduleWindow}). A run at 01:05 with period 1h reads
 * [00:00:00.000, 00:59:59.999]; the next starts at 01:00:00.000.
 */
abstract class WindowBoundUDF extends GenericUDF {
  private transient PrimitiveObjectInspector[] in;
  private transient LongWritable out;

  abstract String name();

  abstract int bound(); // 0 = start, 1 = end

  @Override
  public ObjectInspector initialize(ObjectInspector[] args) throws UDFArgumentException {
    Args.count(name(), args, 2, 4, "(schedule, period[, lag[, tz]])");
    in = new PrimitiveObjectInspector[args.length];
    String[] names = {"schedule", "period", "lag", "tz"};
    for (int i = 0; i < args.length; i++) {
      in[i] = Args.primitive(name(), args, i, names[i]);
    }
    out = new LongWritable();
    return PrimitiveObjectInspectorFactory.writableLongObjectInspector;
  }

  @Override
  public Object evaluate(DeferredObject[] args) throws org.apache.hadoop.hive.ql.metadata.HiveException {
    String period = Args.string(args[1].get(), in[1]);
    String lag = args.length > 2 ? Args.string(args[2].get(), in[2]) : "0ms";
    String tz = args.length > 3 ? Args.string(args[3].get(), in[3]) : "UTC";
    if (period == null || lag == null || tz == null) {
      return null;
    }
    ZoneId zone = Args.zone(name(), tz);
    Long schedule = Args.millis(name(), args[0].get(), in[0], zone);
    if (schedule == null) {
      return null;
    }
    long p = Args.duration(name(), "period", period);
    if (p <= 0) {
      throw new IllegalArgumentException(name() + ": the period must be positive, not " + period);
    }
    long[] window = new PeriodClock(zone).scheduleWindow(schedule, p, Args.duration(name(), "lag", lag));
    out.set(window[bound()]);
    return out;
  }

  @Override
  public String getDisplayString(String[] children) {
    return name() + "(" + String.join(", ", children) + ")";
  }
}
