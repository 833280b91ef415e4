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
   * ISO-8601 (no offset = UTC). Null for null.
   */
  static Long millis(String fn, Object value, PrimitiveObjectInspector oi) {
    if (value == null) {
      return null;
    }
    switch (oi.getPrimitiveCategory()) {
      case BYTE: case SHORT: case INT: case LONG:
        return PrimitiveObjectInspectorUtils.getLong(value, oi);
      case TIMESTAMP:
        return PrimitiveObjectInspectorUtils.getTimestamp(value, oi).getTime();
      case STRING: case VARCHAR: case CHAR:
        String s = PrimitiveObjectInspectorUtils.getString(value, oi);
        return MtimeWindow.parseInstant(fn, s, true);
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

  /** Milliseconds of "90s", "15m", "1h", "1d", "1w", "500ms" (the units trib's CLI takes). */
  static long duration(String fn, String text) {
    java.util.regex.Matcher m = java.util.regex.Pattern
        .compile("^\\s*([0-9]+(?:\\.[0-9]+)?)\\s*(ms|s|m|h|d|w)\\s*$").matcher(text);
    if (!m.matches()) {
      throw new IllegalArgumentException(fn + ": " + text + " is not a duration (e.g. 15m, 1h, 1d)");
    }
    double n = Double.parseDouble(m.group(1));
    long unit;
    switch (m.group(2)) {
      case "ms": unit = 1L; break;
      case "s": unit = 1000L; break;
      case "m": unit = 60_000L; break;
      case "h": unit = 3_600_000L; break;
      case "d": unit = 86_400_000L; break;
      default: unit = 604_800_000L;
    }
    return Math.round(n * unit);
  }
}
