package trib.udfs;

import java.io.BufferedReader;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
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
 *
 * <p>A compacted file ({@code trib compact}) is judged by the mtime span its name carries
 * ({@code part-…~m<lo>-<hi>.ext}, {@link MtimeWindow#span}), never by its own mtime, and without a stat:
 * the name is enough. It passes iff the window holds the whole span, is skipped iff it holds none of
 * it, and a window that holds part of it fails the query naming the file and the span (read windows
 * aligned to the table's compaction period). This is Python's rule (tributary_read/read/visibility.py
 * {@code span_in_window}); a name with the mark but no valid span is judged by its mtime, as any other.
 * (A directory whose name carried a span would be judged by it too; trib names none so.)
 *
 * <p>A file of a trib table that has restated partitions ({@code _tributary/restated} in an ancestor
 * directory: a restate job recomputed them) fails the query: a restated partition's new files carry fresh
 * mtimes and every record of the partition, so a window would read each of them again. This is Python's
 * rule (tributary_read/read/resolve.py {@code mtime_files}), in its words. Each directory's answer is
 * cached, so a partition's files cost one walk up the tree.
 */
public final class MtimeWindowPathFilter extends Configured implements PathFilter, Serializable {
  private static final long serialVersionUID = 1L;
  private transient MtimeWindow window;
  private transient boolean parsed;
  /** Directory -> the table root above it that has restated partitions, or "" for none. */
  private transient Map<String, String> restatedRoot = new HashMap<>();

  /**
   * Spark lists a table of more than {@code spark.sql.sources.parallelPartitionDiscovery.threshold} (32)
   * partitions in a job of its own, and ships the filter to its executors: it must serialize, with the
   * configuration it judges by (a Writable, carried as its bytes), or every such query fails ("Task not
   * serializable"), and a filter arriving without its window would accept every file.
   */
  private void writeObject(ObjectOutputStream out) throws IOException {
    out.defaultWriteObject();
    Configuration conf = getConf();
    out.writeBoolean(conf != null);
    if (conf != null) {
      conf.write(out);
    }
  }

  private void readObject(ObjectInputStream in) throws IOException, ClassNotFoundException {
    in.defaultReadObject();
    restatedRoot = new HashMap<>();
    Configuration conf = null;
    if (in.readBoolean()) {
      conf = new Configuration(false);
      conf.readFields(in);
    }
    setConf(conf);
  }

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
    String name = path.getName();
    if (!MtimeWindow.unfinished(name)) {
      long[] span = MtimeWindow.span(name);
      if (span != null) {
        refuseRestated(path.getParent());
        return w.containsSpan(path.toString(), span[0], span[1]);
      }
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
    if (MtimeWindow.unfinished(name)) {
      return false;
    }
    refuseRestated(path.getParent());
    return w.contains(st.getModificationTime());
  }

  /** Fails the listing where {@code dir} lies in a trib table that has restated partitions. */
  private void refuseRestated(Path dir) {
    String root = restatedRootOf(dir);
    if (!root.isEmpty()) {
      throw new IllegalArgumentException(root + " has restated partitions: a window of mtimes would read each of "
          + "their records again; read this table from a job whose output mode is restate");
    }
  }

  private String restatedRootOf(Path dir) {
    if (dir == null) {
      return "";
    }
    String key = dir.toString();
    String known = restatedRoot.get(key);
    if (known != null) {
      return known;
    }
    String found;
    try {
      found = dir.getFileSystem(getConf()).exists(new Path(dir, "_tributary/restated"))
          ? key : restatedRootOf(dir.getParent());
    } catch (IOException e) {
      throw new UncheckedIOException("trib mtime window: cannot look for " + dir + "/_tributary", e);
    }
    restatedRoot.put(key, found);
    return found;
  }

  /**
   * For tests: each input line is {@code starttime<TAB>endtime<TAB>path} (epoch ms under the seed's
   * {@code dip.*} keys, an empty bound unset); each output line is this filter's answer for the path
   * under that window: {@code in}, {@code out} or {@code err<TAB>message} (the window refused).
   */
  public static void main(String[] args) throws IOException {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    StringBuilder out = new StringBuilder();
    Configuration base = new Configuration();
    base.set(MtimeWindow.DIP + "sync", "true");
    Map<String, MtimeWindowPathFilter> filters = new HashMap<>();
    for (String line = in.readLine(); line != null; line = in.readLine()) {
      String[] f = line.split("\t", 3);
      MtimeWindowPathFilter filter = filters.computeIfAbsent(f[0] + "\t" + f[1], k -> {
        Configuration conf = new Configuration(base);
        conf.set(MtimeWindow.DIP + "starttime", f[0]);
        conf.set(MtimeWindow.DIP + "endtime", f[1]);
        MtimeWindowPathFilter one = new MtimeWindowPathFilter();
        one.setConf(conf);
        return one;
      });
      try {
        out.append(filter.accept(new Path(f[2])) ? "in" : "out");
      } catch (IllegalArgumentException e) {
        out.append("err\t").append(e.getMessage().replace('\n', ' '));
      }
      out.append('\n');
    }
    System.out.print(out);
    System.out.flush();
  }
}
