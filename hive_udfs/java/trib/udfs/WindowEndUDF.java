package trib.udfs;

import org.apache.hadoop.hive.ql.exec.Description;

/** {@code trib_window_end_ms(schedule, period[, lag[, tz]])}: the window's last ms (inclusive). */
@Description(name = "trib_window_end_ms",
    value = "_FUNC_(schedule, period[, lag[, tz]]) - last ms (inclusive) of the closed window a "
        + "run at schedule reads; the next window starts 1 ms later")
public final class WindowEndUDF extends WindowBoundUDF {
  @Override
  String name() {
    return "trib_window_end_ms";
  }

  @Override
  int bound() {
    return 1;
  }
}
