package trib.udfs;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.time.DateTimeException;
import java.time.LocalDateTime;
import java.time.ZoneId;
import java.time.ZoneOffset;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Durations and instants as trib's Python reads them (tributary_read/timespec.py): the same grammar,
 * the same refusals, the same messages, held equal by tests/test_timespec.py through {@link #main}.
 * A duration carries its unit ({@code 0} alone aside); an instant carries its offset or is epoch ms.
 */
public final class TimeSpec {
  private TimeSpec() {}

  public static final long MAX_INSTANT_MS = 253_402_300_799_999L;
  public static final long SECONDS_LIMIT = 100_000_000_000L;
  static final String EXAMPLES = "e.g. 500ms, 30s, 10m, 1h, 7d";
  private static final Pattern DURATION =
      Pattern.compile("^\\s*([0-9]+(?:\\.[0-9]+)?)\\s*(ms|s|m|h|d|w)\\s*$");
  private static final Pattern ZERO = Pattern.compile("^\\s*0+(?:\\.0+)?\\s*$");
  private static final Pattern DIGITS = Pattern.compile("^\\s*-?[0-9]+\\s*$");
  private static final Pattern ISO = Pattern.compile(
      "^\\s*([0-9]{4})-([0-9]{2})-([0-9]{2})(?:[Tt ]([0-9]{2}):([0-9]{2})"
          + "(?::([0-9]{2})(?:\\.([0-9]{1,9}))?)?)?\\s*(Z|z|[+-][0-9]{2}:?[0-9]{2})?\\s*$");

  private static long unit(String u) {
    switch (u) {
      case "ms": return 1L;
      case "s": return 1000L;
      case "m": return 60_000L;
      case "h": return 3_600_000L;
      case "d": return 86_400_000L;
      default: return 604_800_000L;
    }
  }

  private static String quote(String s) {
    return "'" + s + "'";
  }

  private static String head(String s, int n) {
    return s.length() > n ? s.substring(0, n) : s;
  }

  /** Milliseconds of a duration spelled with its unit. */
  public static long durationMs(String what, String text) {
    if (text == null) {
      throw new IllegalArgumentException(what + " None is not a duration (" + EXAMPLES + ")");
    }
    if (ZERO.matcher(text).matches()) {
      return 0L;
    }
    String t = text.trim();
    Matcher m = DURATION.matcher(text);
    if (!m.matches()) {
      if (DIGITS.matcher(text).matches()) {
        String hint = t.startsWith("-") ? "a duration is never negative" : "write " + t + "s or " + t + "ms";
        throw new IllegalArgumentException(what + " " + t + " has no unit: " + hint + " (" + EXAMPLES + ")");
      }
      throw new IllegalArgumentException(what + " " + quote(t) + " is not a duration (" + EXAMPLES + ")");
    }
    BigDecimal ms = new BigDecimal(m.group(1)).multiply(BigDecimal.valueOf(unit(m.group(2))));
    if (ms.stripTrailingZeros().scale() > 0) {
      throw new IllegalArgumentException(what + " " + t + " is not a whole number of milliseconds");
    }
    if (ms.compareTo(BigDecimal.valueOf(MAX_INSTANT_MS)) > 0) {
      throw new IllegalArgumentException(what + " " + t + " is longer than 9999 years");
    }
    return ms.longValueExact();
  }

  /** Epoch ms of an ISO-8601 instant with an offset, or of epoch milliseconds. */
  public static long instantMs(String what, String text, ZoneId zone) {
    String t = text == null ? "" : text.trim();
    if (t.isEmpty()) {
      throw new IllegalArgumentException("empty " + what);
    }
    if (DIGITS.matcher(t).matches()) {
      return epochMs(what, t);
    }
    Matcher m = ISO.matcher(t);
    if (!m.matches()) {
      throw new IllegalArgumentException("unparsable " + what + " " + quote(head(t, 60))
          + ": use ISO-8601 with an offset (2020-06-24T01:05:00+08:00, 2020-06-23T17:05:00Z) or epoch"
          + " milliseconds");
    }
    int year = Integer.parseInt(m.group(1));
    LocalDateTime local;
    try {
      if (year < 1) {
        throw new DateTimeException("year 0");
      }
      local = LocalDateTime.of(year, Integer.parseInt(m.group(2)), Integer.parseInt(m.group(3)),
          m.group(4) == null ? 0 : Integer.parseInt(m.group(4)),
          m.group(5) == null ? 0 : Integer.parseInt(m.group(5)),
          m.group(6) == null ? 0 : Integer.parseInt(m.group(6)));
    } catch (DateTimeException e) {
      throw new IllegalArgumentException("unparsable " + what + " " + quote(head(t, 60))
          + ": not a valid date and time");
    }
    String frac = m.group(7);
    String wall = wall(local, frac);
    if (m.group(4) == null) {
      throw new IllegalArgumentException(what + " " + head(t, 60) + " is a date, not an instant: write "
          + wall + "Z (UTC)");
    }
    String off = m.group(8);
    if (off == null) {
      throw new IllegalArgumentException(noOffset(what, local, wall, zone, t));
    }
    long offsetS = 0;
    if (!off.equalsIgnoreCase("Z")) {
      int sign = off.charAt(0) == '-' ? -1 : 1;
      String digits = off.substring(1).replace(":", "");
      int oh = Integer.parseInt(digits.substring(0, 2));
      int om = Integer.parseInt(digits.substring(2));
      if (oh > 18 || om > 59 || (oh == 18 && om != 0)) {
        throw new IllegalArgumentException(what + " " + quote(head(t, 60)) + ": the offset " + off
            + " is outside -18:00..+18:00");
      }
      offsetS = sign * (oh * 3600L + om * 60L);
    }
    String ms3 = (frac == null ? "0" : frac);
    ms3 = (ms3 + "00").substring(0, 3);
    long wallMs = local.toEpochSecond(ZoneOffset.UTC) * 1000L + Integer.parseInt(ms3);
    return wallMs - offsetS * 1000L;
  }

  /** Epoch milliseconds from digits: not seconds (below 1e11), not negative, not past 9999. */
  public static long epochMs(String what, String digits) {
    String t = digits.trim();
    BigInteger v = new BigInteger(t);
    if (v.signum() < 0 || (v.signum() > 0 && v.compareTo(BigInteger.valueOf(SECONDS_LIMIT)) < 0)) {
      throw new IllegalArgumentException(what + " " + head(t, 30)
          + " looks like epoch seconds, not milliseconds (e.g. 1592928000000)");
    }
    if (v.compareTo(BigInteger.valueOf(MAX_INSTANT_MS)) > 0) {
      throw new IllegalArgumentException(what + " " + head(t, 30) + " is past the year 9999 (epoch ms)");
    }
    return v.longValueExact();
  }

  /** {@link #epochMs(String, String)} of a BIGINT argument: seconds and years past 9999 refused alike. */
  public static long epochMs(String what, long v) {
    return epochMs(what, Long.toString(v));
  }

  /**
   * The partition value of {@code ms} under a {@link java.time.format.DateTimeFormatter} pattern in
   * {@code zone}; refused, as Python's Layout.for_time refuses, when its local time is outside years
   * 1..9999 (java.time would print year 10000 as "+10000").
   */
  public static String partitionValue(java.time.format.DateTimeFormatter formatter, long ms, ZoneId zone,
      String pattern) {
    java.time.ZonedDateTime local = java.time.Instant.ofEpochMilli(ms).atZone(zone);
    if (local.getYear() < 1 || local.getYear() > 9999) {
      throw new IllegalArgumentException("event time " + ms + " ms is out of range: no partition of pattern "
          + quote(pattern) + " holds it in zone " + zone.getId() + " (years 0001..9999)");
    }
    return formatter.format(local);
  }

  private static String wall(LocalDateTime local, String frac) {
    return String.format("%04d-%02d-%02dT%02d:%02d:%02d", local.getYear(), local.getMonthValue(),
        local.getDayOfMonth(), local.getHour(), local.getMinute(), local.getSecond())
        + (frac == null ? "" : "." + frac);
  }

  private static String noOffset(String what, LocalDateTime local, String wall, ZoneId zone, String t) {
    String msg = what + " " + head(t, 60) + " has no UTC offset: write " + wall + "Z (UTC)";
    if (zone != null && !zone.equals(ZoneOffset.UTC) && !zone.getId().equals("UTC")) {
      // A gap has no offset (its clocks skip it), an overlap two, earlier first: as Python's _wall_offsets.
      java.util.List<ZoneOffset> offs = zone.getRules().getValidOffsets(local);
      if (offs.isEmpty()) {
        msg += " (" + wall + " does not exist in " + zone.getId() + ": its clocks skip it)";
      } else if (offs.size() == 1) {
        msg += " or " + wall + spelled(offs.get(0)) + " (" + zone.getId() + ")";
      } else {
        msg += " or " + wall + spelled(offs.get(0)) + " or " + wall + spelled(offs.get(1)) + " ("
            + zone.getId() + ": that wall time happens twice)";
      }
    }
    return msg;
  }

  private static String spelled(ZoneOffset off) {
    int mins = off.getTotalSeconds() / 60;
    int a = Math.abs(mins);
    return String.format("%s%02d:%02d", mins < 0 ? "-" : "+", a / 60, a % 60);
  }

  /**
   * The parity harness: each stdin line is {@code D<TAB>text}, {@code I<TAB>text<TAB>zone},
   * {@code E<TAB>long}, {@code P<TAB>long<TAB>pattern<TAB>zone} or
   * {@code W<TAB>schedule<TAB>period<TAB>lag<TAB>zone}; each output line is {@code ok<TAB>value} or
   * {@code err<TAB>message}, in order.
   */
  public static void main(String[] args) throws Exception {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    StringBuilder out = new StringBuilder();
    for (String line = in.readLine(); line != null; line = in.readLine()) {
      String[] f = line.split("\t", -1);
      try {
        String value;
        switch (f[0]) {
          case "D":
            value = String.valueOf(durationMs("duration", f[1]));
            break;
          case "I":
            value = String.valueOf(instantMs("time", f[1], f[2].isEmpty() ? null : ZoneId.of(f[2])));
            break;
          case "E": // a BIGINT instant argument of a UDF (Args.millis)
            value = String.valueOf(epochMs("time", Long.parseLong(f[1])));
            break;
          case "P": // trib_partition_value(BIGINT ms, pattern, zone)
            ZoneId pz = ZoneId.of(f[3]);
            value = partitionValue(java.time.format.DateTimeFormatter.ofPattern(f[2]).withZone(pz),
                epochMs("time", Long.parseLong(f[1])), pz, f[2]);
            break;
          default:
            ZoneId z = ZoneId.of(f[4]);
            long[] w = new PeriodClock(z).scheduleWindow(instantMs("schedule time", f[1], z),
                durationMs("period", f[2]), durationMs("lag", f[3]));
            value = w[0] + "," + w[1];
        }
        out.append("ok\t").append(value);
      } catch (IllegalArgumentException e) {
        out.append("err\t").append(e.getMessage());
      }
      out.append('\n');
    }
    System.out.print(out);
    System.out.flush();
  }
}
