package trib.udfs;

import org.apache.hadoop.hive.ql.exec.Description;

/** {@code trib_window_start_ms(schedule, period[, lag[, tz]])}: the window's first millisecond. */
@Description(name = "trib_window_start_ms",
    value = "_FUNC_(schedule, period[, lag[, tz]]) - first ms of the closed window a run at "
        + "schedule reads (the last whole period before schedule - lag)")
public final class WindowStartUDF extends WindowBoundUDF {
  @Override
  String name() {
    return "trib_window_start_ms";
  }

  @Override
  int bound() {
    return 0;
  }
}
