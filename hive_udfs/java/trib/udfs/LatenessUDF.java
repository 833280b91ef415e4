package trib.udfs;

import org.apache.hadoop.hive.ql.exec.Description;
import org.apache.hadoop.hive.ql.exec.UDFArgumentException;
import org.apache.hadoop.hive.ql.udf.generic.GenericUDF;
import org.apache.hadoop.hive.serde2.objectinspector.ObjectInspector;
import org.apache.hadoop.hive.serde2.objectinspector.PrimitiveObjectInspector;
import org.apache.hadoop.hive.serde2.objectinspector.primitive.PrimitiveObjectInspectorFactory;
import org.apache.hadoop.io.LongWritable;

/** {@code trib_lateness_ms(arrival, event)}: how late a record arrived (negative = early). */
@Description(name = "trib_lateness_ms",
    value = "_FUNC_(arrival, event) - arrival minus event time in ms; each a BIGINT epoch ms, "
        + "TIMESTAMP or ISO-8601 string")
public final class LatenessUDF extends GenericUDF {
  private static final String FN = "trib_lateness_ms";
  private transient PrimitiveObjectInspector[] in;
  private transient LongWritable out;

  @Override
  public ObjectInspector initialize(ObjectInspector[] args) throws UDFArgumentException {
    Args.count(FN, args, 2, 2, "(arrival, event)");
    in = new PrimitiveObjectInspector[] {
      Args.primitive(FN, args, 0, "arrival"), Args.primitive(FN, args, 1, "event")};
    out = new LongWritable();
    return PrimitiveObjectInspectorFactory.writableLongObjectInspector;
  }

  @Override
  public Object evaluate(DeferredObject[] args) throws org.apache.hadoop.hive.ql.metadata.HiveException {
    Long arrival = Args.millis(FN, args[0].get(), in[0]);
    Long event = Args.millis(FN, args[1].get(), in[1]);
    if (arrival == null || event == null) {
      return null;
    }
    out.set(arrival - event);
    return out;
  }

  @Override
  public String getDisplayString(String[] children) {
    return FN + "(" + String.join(", ", children) + ")";
  }
}
