package trib.udfs;

import java.time.LocalDateTime;
import java.time.ZoneId;
import java.time.ZoneOffset;
import java.time.zone.ZoneOffsetTransition;
import java.time.zone.ZoneRules;
import java.util.List;

/**
 * Periods aligned to a zone's wall clock: the Java twin of tributary_read/read/window.py
 * (floor_to_period, shift_periods, TimeWindow.previous_period), kept equal by a test. A DST change
 * makes the period it falls in shorter or longer; a wall time a jump skips over starts at the jump.
 */
final class PeriodClock {
  private final ZoneRules rules;

  PeriodClock(ZoneId zone) {
    this.rules = zone.getRules();
  }

  long wall(long ms) {
    return ms + rules.getOffset(java.time.Instant.ofEpochMilli(ms)).getTotalSeconds() * 1000L;
  }

  /**
   * The first instant whose wall clock reads {@code wall} or later. A wall time outside years
   * 1..9999 is an ArithmeticException, where Python's datetime overflows.
   */
  long boundary(long wall) {
    if (wall < MIN_INSTANT_MS || wall > TimeSpec.MAX_INSTANT_MS) {
      throw new ArithmeticException("wall time outside years 1..9999");
    }
    LocalDateTime local = LocalDateTime.ofEpochSecond(Math.floorDiv(wall, 1000L),
        (int) Math.floorMod(wall, 1000L) * 1_000_000, ZoneOffset.UTC);
    List<ZoneOffset> offsets = rules.getValidOffsets(local);
    if (offsets.isEmpty()) { // in a spring-forward gap: the period starts at the jump
      ZoneOffsetTransition t = rules.getTransition(local);
      return t.getInstant().toEpochMilli();
    }
    return local.toInstant(offsets.get(0)).toEpochMilli(); // first occurrence of a repeated time
  }

  long index(long ms, long period) {
    long w = wall(ms);
    long k = w - Math.floorMod(w, period);
    while (boundary(k + period) <= ms) {
      k += period;
    }
    return k;
  }

  long floor(long ms, long period) {
    return boundary(index(ms, period));
  }

  long previous(long boundaryMs, long period) {
    long k = index(boundaryMs, period);
    long nb = boundary(k);
    while (nb >= boundaryMs) {
      k -= period;
      nb = boundary(k);
    }
    return nb;
  }

  /**
   * The window of a run at {@code schedule}: the last whole period ending by {@code schedule - lag}
   * (Python's {@code Schedule.window}, aligned form). Windows stay within years 1..9999, as in Python.
   */
  long[] scheduleWindow(long schedule, long period, long lag) {
    if (period <= 0) {
      throw new IllegalArgumentException("the period must be positive");
    }
    long[] w;
    try {
      w = previousPeriod(schedule, period, lag);
    } catch (ArithmeticException | java.time.DateTimeException e) {
      w = null;
    }
    if (w == null || w[0] < MIN_INSTANT_MS || w[1] > TimeSpec.MAX_INSTANT_MS) {
      throw new IllegalArgumentException("the window of the run at " + schedule
          + " ms lies outside years 1..9999");
    }
    return w;
  }

  static final long MIN_INSTANT_MS = -62_135_596_800_000L;

  /**
   * [start, end] of the last whole period before {@code schedule - lag}; end = next start - 1. A
   * schedule on a period boundary with a lag (a run time) reads the periods that reached their lag
   * since the previous boundary, [floor(prev - lag), floor(schedule - lag)): zero, one or two
   * periods where periods differ in length, so consecutive runs tile (Python's Schedule._run_window).
   */
  long[] previousPeriod(long schedule, long period, long lag) {
    long b = floor(schedule - lag, period);
    if (lag != 0 && floor(schedule, period) == schedule) {
      return new long[] {floor(previous(schedule, period) - lag, period), b - 1};
    }
    return new long[] {previous(b, period), b - 1};
  }
}
