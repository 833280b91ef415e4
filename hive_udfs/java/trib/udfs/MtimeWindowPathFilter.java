package trib.udfs;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.UncheckedIOException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.conf.Configured;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathFilter;

/**
 * Seed 002's patched {@code FileInputFormat.listStatus}, as a stock path filter.
 *
 * <p>Set as {@code mapreduce.input.pathFilter.class}; both Hadoop input-format APIs apply it while
 * listing a job's input, and Spark's Hive table scans copy the session's {@code SET}s into the
 * configuration they list with. With sync off or absent it accepts every path without touching the
 * file system. With sync on it stats each path (a PathFilter sees only the path): directories pass,
 * because Hadoop also filters the input (partition) directories themselves and the children of a
 * recursive listing; unfinished names are rejected; a file passes iff its mtime lies in the closed
 * window.
 */
public final class MtimeWindowPathFilter extends Configured implements PathFilter {
  private MtimeWindow window;
  private boolean parsed;

  @Override
  public void setConf(Configuration conf) {
    super.setConf(conf);
    parsed = false;
  }

  private MtimeWindow window() {
    if (!parsed) {
      Configuration conf = getConf();
      window = conf == null ? null : MtimeWindow.from(conf::get);
      parsed = true;
    }
    return window;
  }

  @Override
  public boolean accept(Path path) {
    MtimeWindow w = window();
    if (w == null) {
      return true;
    }
    FileStatus st;
    try {
      st = path.getFileSystem(getConf()).getFileStatus(path);
    } catch (FileNotFoundException gone) {
      return false; // deleted between the listing and this stat: nothing to read
    } catch (IOException e) {
      throw new UncheckedIOException("trib mtime window: cannot stat " + path, e);
    }
    if (st.isDirectory()) {
      return true;
    }
    return !MtimeWindow.unfinished(path.getName()) && w.contains(st.getModificationTime());
  }
}
