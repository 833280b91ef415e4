package trib.udfs;

import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.function.Function;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The closed modification-time window of seed 002, read from a job's configuration.
 *
 * <p>{@code dip.mapreduce.input.fileinputformat.sync/starttime/endtime} keep exactly the seed's
 * meaning: epoch milliseconds, both bounds inclusive, Long.MIN_VALUE / Long.MAX_VALUE when absent.
 * {@code tributary.input.sync/starttime/endtime} say the same and also take ISO-8601 with an offset.
 * Unlike Hadoop's {@code getBoolean}/{@code getLong}, a value that does not parse fails the query: a
 * typo must never silently read every file. An empty value is an unset key.
 *
 * <p>When a key is set in both namespaces, the two must mean the same (the same instant, the same
 * switch) or the query fails naming both. A long-lived session (the Thrift Server, beeline) keeps a
 * {@code tributary.input.*} key from an earlier script; letting it silently win over the seed's
 * {@code dip.*} line would read another window's files.
 */
public final class MtimeWindow {
  public static final String DIP = "dip.mapreduce.input.fileinputformat.";
  public static final String TRIB = "tributary.input.";

  public final long start;
  public final long end;

  private MtimeWindow(long start, long end) {
    this.start = start;
    this.end = end;
  }

  public boolean contains(long mtime) {
    return start <= mtime && mtime <= end;
  }

  /** The mark of a compacted file's name: trib's {@code COMPACTED_MARK} (tributary_read/io/storage.py). */
  public static final String COMPACTED_MARK = "~m";
  /** trib's {@code mtime_span} (tributary_read/table/names.py), ASCII digits only, as there. */
  private static final Pattern SPAN = Pattern.compile(Pattern.quote(COMPACTED_MARK) + "([0-9]{1,16})-([0-9]{1,16})\\.");

  /**
   * The mtime span {lo, hi} (epoch ms) a compacted file's name carries, or null for any other name.
   * {@code name} is the last component of the path. Exactly Python's {@code mtime_span}: the first
   * {@code ~m<1..16 digits>-<1..16 digits>.} in the name; no order between lo and hi is checked there
   * either. A name with the mark but no such span is an ordinary name.
   */
  public static long[] span(String name) {
    if (!name.contains(COMPACTED_MARK)) {
      return null;
    }
    Matcher m = SPAN.matcher(name);
    return m.find() ? new long[] {Long.parseLong(m.group(1)), Long.parseLong(m.group(2))} : null;
  }

  /**
   * Whether a compacted file, whose name carries the span [lo, hi] of the mtimes of the files it
   * merged, belongs to this window; its own mtime (on S3: when the compaction ran) plays no part.
   * All of the span in the window: it does. None of it: it does not (its records were read as the
   * originals, in the windows that held them). Part: no answer is exact, since a file cannot be read
   * in part, so this throws, naming the file: Python's {@code span_in_window}
   * (tributary_read/read/visibility.py) decides alike and refuses with the same words.
   */
  public boolean containsSpan(String file, long lo, long hi) {
    if (start <= lo && hi <= end) {
      return true;
    }
    if (hi < start || lo > end) {
      return false;
    }
    throw new IllegalArgumentException("trib mtime window: " + file + " is a compacted file of files modified "
        + instant(lo) + " .. " + instant(hi) + ", and the window " + instant(start) + " .. " + instant(end)
        + " holds only part of that: read windows aligned to the table's compaction period (compact.period, "
        + "docs/compaction.md)");
  }

  private static final DateTimeFormatter ISO =
      DateTimeFormatter.ofPattern("uuuu-MM-dd'T'HH:mm:ss.SSSxxx").withZone(ZoneOffset.UTC);

  /** As Python's message spells an instant: ISO-8601 in UTC with ms in years 1..9999, else the epoch ms. */
  static String instant(long ms) {
    if (ms == Long.MIN_VALUE || ms == Long.MAX_VALUE) {
      return "(open)";
    }
    if (ms < PeriodClock.MIN_INSTANT_MS || ms > TimeSpec.MAX_INSTANT_MS) {
      return ms + " ms";
    }
    return ISO.format(Instant.ofEpochMilli(ms));
  }

  /** The window, or null when sync is off or absent. {@code get} returns null for unset keys. */
  public static MtimeWindow from(Function<String, String> get) {
    if (!syncOn(get)) {
      return null;
    }
    long start = bound(get, "starttime", Long.MIN_VALUE);
    long end = bound(get, "endtime", Long.MAX_VALUE);
    if (start > end && start - end != 1) { // endtime = starttime - 1 is the empty window a run may get
      throw new IllegalArgumentException("trib mtime window: starttime " + start
          + " is after endtime " + end + " (both are inclusive epoch milliseconds)");
    }
    return new MtimeWindow(start, end);
  }

  public static boolean syncOn(Function<String, String> get) {
    Boolean trib = flag(get, TRIB + "sync");
    Boolean dip = flag(get, DIP + "sync");
    if (trib != null && dip != null && !trib.equals(dip)) {
      throw disagree("sync", get);
    }
    return Boolean.TRUE.equals(trib != null ? trib : dip);
  }

  private static Boolean flag(Function<String, String> get, String key) {
    String v = get.apply(key);
    if (v == null || v.trim().isEmpty()) {
      return null;
    }
    String t = v.trim();
    if (t.equalsIgnoreCase("true")) {
      return Boolean.TRUE;
    }
    if (t.equalsIgnoreCase("false")) {
      return Boolean.FALSE;
    }
    throw new IllegalArgumentException("trib mtime window: " + key + "=" + v
        + " is not true or false");
  }

  private static long bound(Function<String, String> get, String name, long dflt) {
    String t = get.apply(TRIB + name);
    String d = get.apply(DIP + name);
    Long trib = t == null || t.trim().isEmpty() ? null : parseInstant(TRIB + name, t, true);
    Long dip = d == null || d.trim().isEmpty() ? null : parseInstant(DIP + name, d, false);
    if (trib != null && dip != null && !trib.equals(dip)) {
      throw disagree(name, get);
    }
    return trib != null ? trib : dip != null ? dip : dflt;
  }

  private static IllegalArgumentException disagree(String name, Function<String, String> get) {
    return new IllegalArgumentException("trib mtime window: " + TRIB + name + "=" + get.apply(TRIB + name)
        + " and " + DIP + name + "=" + get.apply(DIP + name) + " disagree; RESET the one this "
        + "script does not mean (a session keeps every SET until it ends)");
  }

  /**
   * Epoch ms from digits, or (when {@code iso}) also ISO-8601 with an offset, by {@link TimeSpec}: a time
   * without an offset is refused, as every trib front end refuses it.
   */
  public static long parseInstant(String what, String value, boolean iso) {
    String t = value.trim();
    try {
      if (iso) {
        return TimeSpec.instantMs(what, t, null);
      }
      if (!t.matches("-?[0-9]+")) {
        throw new IllegalArgumentException("not epoch milliseconds (e.g. 1592928000000)");
      }
      return TimeSpec.epochMs(what, t);
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException("trib mtime window: " + what + "=" + value + ": " + e.getMessage());
    }
  }

  /**
   * Names a writer has not finished: Hive's hidden files ({@code _x}, {@code .x}) and the usual
   * in-progress suffixes (trib's and Flink's {@code .inprogress}, {@code .pending}, {@code .tmp},
   * {@code hadoop fs -put}'s {@code ._COPYING_}).
   */
  public static boolean unfinished(String name) {
    return name.startsWith("_") || name.startsWith(".") || name.endsWith(".inprogress")
        || name.endsWith(".pending") || name.endsWith(".tmp") || name.endsWith("._COPYING_")
        || name.endsWith(".in-progress");
  }
}
