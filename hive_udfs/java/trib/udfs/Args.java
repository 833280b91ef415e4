package trib.udfs;

import java.time.ZoneId;
import org.apache.hadoop.hive.ql.exec.UDFArgumentException;
import org.apache.hadoop.hive.ql.exec.UDFArgumentTypeException;
import org.apache.hadoop.hive.serde2.objectinspector.ObjectInspector;
import org.apache.hadoop.hive.serde2.objectinspector.PrimitiveObjectInspector;
import org.apache.hadoop.hive.serde2.objectinspector.primitive.PrimitiveObjectInspectorUtils;

/** Argument checks and conversions shared by trib's GenericUDFs. */
final class Args {
  private Args() {}

  static PrimitiveObjectInspector primitive(String fn, ObjectInspector[] args, int i, String what)
      throws UDFArgumentException {
    if (!(args[i] instanceof PrimitiveObjectInspector)) {
      throw new UDFArgumentTypeException(i, fn + ": argument " + (i + 1) + " (" + what
          + ") must be a primitive, not " + args[i].getTypeName());
    }
    return (PrimitiveObjectInspector) args[i];
  }

  static void count(String fn, ObjectInspector[] args, int min, int max, String usage)
      throws UDFArgumentException {
    if (args.length < min || args.length > max) {
      throw new UDFArgumentException(fn + " takes " + usage + ", got " + args.length
          + " argument(s)");
    }
  }

  /**
   * Epoch ms of an instant argument: an integer (epoch ms), a TIMESTAMP, or a string of digits or
   * ISO-8601 with an offset ({@link TimeSpec}). Null for null.
   */
  static Long millis(String fn, Object value, PrimitiveObjectInspector oi) {
    return millis(fn, value, oi, null);
  }

  /**
   * As {@link #millis(String, Object, PrimitiveObjectInspector)}; {@code zone} (the call's own zone
   * argument) is named in the refusal of a string without an offset, as trib's CLI names the table's.
   */
  static Long millis(String fn, Object value, PrimitiveObjectInspector oi, ZoneId zone) {
    if (value == null) {
      return null;
    }
    switch (oi.getPrimitiveCategory()) {
      case BYTE: case SHORT: case INT: case LONG: // epoch ms, as Python reads an integer: never seconds
        return TimeSpec.epochMs(fn, PrimitiveObjectInspectorUtils.getLong(value, oi));
      case TIMESTAMP:
        long ts = PrimitiveObjectInspectorUtils.getTimestamp(value, oi).getTime();
        if (ts < PeriodClock.MIN_INSTANT_MS || ts > TimeSpec.MAX_INSTANT_MS) {
          throw new IllegalArgumentException(fn + " " + ts + " is outside years 1..9999 (epoch ms)");
        }
        return ts;
      case STRING: case VARCHAR: case CHAR:
        String s = PrimitiveObjectInspectorUtils.getString(value, oi);
        return TimeSpec.instantMs(fn, s, zone);
      default:
        throw new IllegalArgumentException(fn + ": cannot read an instant from "
            + oi.getTypeName() + " (use BIGINT epoch ms, TIMESTAMP or an ISO-8601 string)");
    }
  }

  static String string(Object value, PrimitiveObjectInspector oi) {
    return value == null ? null : PrimitiveObjectInspectorUtils.getString(value, oi);
  }

  static ZoneId zone(String fn, String tz) {
    try {
      return ZoneId.of(tz == null ? "UTC" : tz.trim());
    } catch (RuntimeException e) {
      throw new IllegalArgumentException(fn + ": unknown time zone " + tz);
    }
  }

  /** Milliseconds of a duration with its unit ("90s", "15m", "1h"), by {@link TimeSpec}. */
  static long duration(String fn, String what, String text) {
    return TimeSpec.durationMs(fn + " " + what, text);
  }
}
