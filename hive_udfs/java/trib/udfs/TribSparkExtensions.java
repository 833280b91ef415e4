package trib.udfs;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.hadoop.hive.ql.exec.Description;
import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.catalog.CatalogTable;
import org.apache.spark.sql.catalyst.catalog.HiveTableRelation;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.ExpressionInfo;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.columnar.InMemoryRelation;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.hive.HiveUDFExpressionBuilder;
import org.apache.spark.sql.internal.SQLConf;
import scala.Function1;
import scala.Tuple3;
import scala.collection.immutable.Seq;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * {@code spark.sql.extensions=trib.udfs.TribSparkExtensions}: keeps the mtime window right for Hive
 * tables Spark would read with its native Parquet/ORC readers.
 *
 * <p>Spark converts such tables to its own file source, whose listings are cached across queries
 * (FileStatusCache, cached relations): the path filter would then see a stale or unfiltered listing.
 * So while sync is on, the resolution rule turns {@code spark.sql.hive.convertMetastoreParquet/Orc}
 * off for the session (Hive's SerDe path lists per query through the filter) and restores what it
 * changed once sync is off again. It runs in the Resolution batch, before Spark's post-hoc
 * RelationConversions, so the very query that follows the SET lines is planned without conversion.
 * The check rule is the safety net: a converted Hive table in a plan with sync on fails the query,
 * and so does a window whose keys conflict, before anything is listed.
 *
 * <p>Cached data ({@code CACHE TABLE}, a cached DataFrame) was read when it was cached, under
 * whatever window was then in force; Spark swaps it in for the table after analysis. The optimizer
 * rule, which sees the plan with the cache substituted, fails a query that would read it while
 * sync is on. Views need nothing: a SQL view is re-analyzed at each use, so it reads through the
 * filter, and a DataFrame view stored with a converted relation meets the check rule.
 *
 * <p>The extension also injects trib's Hive GenericUDFs ({@link #FUNCTIONS}) into every session's
 * function registry, so {@code spark-sql}, pyspark and the Spark Thrift Server resolve them from
 * {@code spark.sql.extensions} alone, with no {@code CREATE TEMPORARY FUNCTION}. Each call is
 * built by Spark's own {@code HiveUDFExpressionBuilder}, the builder behind {@code CREATE FUNCTION}
 * in a Hive session, so the functions behave (and fail) exactly as registered ones do.
 */
public final class TribSparkExtensions extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
  static final String[] CONVERSIONS = {
    "spark.sql.hive.convertMetastoreParquet", "spark.sql.hive.convertMetastoreOrc"};

  /** SQL name -> GenericUDF class; the same as {@code FUNCTIONS} in hive_udfs/registry.py (tested). */
  static final Object[][] FUNCTIONS = {
    {"trib_partition_value", PartitionValueUDF.class},
    {"trib_window_start_ms", WindowStartUDF.class},
    {"trib_window_end_ms", WindowEndUDF.class},
    {"trib_lateness_ms", LatenessUDF.class},
    {"trib_file_mtime_ms", FileMtimeUDF.class},
  };

  /** Builds a call of the Hive UDF {@code cls}, as a registered Hive function's call is built. */
  static final class HiveUdfBuilder extends AbstractFunction1<Seq<Expression>, Expression> {
    private final String name;
    private final Class<?> cls;

    HiveUdfBuilder(String name, Class<?> cls) {
      this.name = name;
      this.cls = cls;
    }

    @Override
    public Expression apply(Seq<Expression> children) {
      return HiveUDFExpressionBuilder.makeExpression(name, cls, children);
    }
  }

  static ExpressionInfo info(String name, Class<?> cls) {
    Description d = cls.getAnnotation(Description.class);
    String usage = d == null ? "" : d.value().replace("_FUNC_", name);
    return new ExpressionInfo(cls.getName(), null, name, usage, "");
  }

  @Override
  public BoxedUnit apply(SparkSessionExtensions ext) {
    for (Object[] f : FUNCTIONS) {
      String name = (String) f[0];
      Class<?> cls = (Class<?>) f[1];
      ext.injectFunction(new Tuple3<>(FunctionIdentifier.apply(name), info(name, cls), new HiveUdfBuilder(name, cls)));
    }
    ext.injectResolutionRule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
      @Override
      public Rule<LogicalPlan> apply(SparkSession session) {
        return new ConversionSwitch(session);
      }
    });
    ext.injectOptimizerRule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
      @Override
      public Rule<LogicalPlan> apply(SparkSession session) {
        return new CachedDataCheck(session);
      }
    });
    ext.injectCheckRule(new AbstractFunction1<SparkSession, Function1<LogicalPlan, BoxedUnit>>() {
      @Override
      public Function1<LogicalPlan, BoxedUnit> apply(SparkSession session) {
        return new ConvertedTableCheck(session);
      }
    });
    return BoxedUnit.UNIT;
  }

  /**
   * Sync as the filter will see it, except that an unparsable value counts as on rather than
   * failing here: these rules run for every statement, including the SET that fixes the value.
   * The filter itself fails the query that would read with it.
   */
  static boolean syncOn(SparkSession session) {
    SQLConf conf = session.sessionState().conf();
    try {
      return MtimeWindow.syncOn(key -> conf.getConfString(key, null));
    } catch (IllegalArgumentException unparsable) {
      return true;
    }
  }

  /** Turns the metastore conversions off while sync is on; restores only what it turned off. */
  static final class ConversionSwitch extends Rule<LogicalPlan> {
    private final SparkSession session;
    private final boolean[] switched = new boolean[CONVERSIONS.length];

    ConversionSwitch(SparkSession session) {
      this.session = session;
    }

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
      SQLConf conf = session.sessionState().conf();
      boolean on = syncOn(session);
      for (int i = 0; i < CONVERSIONS.length; i++) {
        String value = conf.getConfString(CONVERSIONS[i], "true");
        if (on && !"false".equalsIgnoreCase(value.trim())) {
          conf.setConfString(CONVERSIONS[i], "false");
          switched[i] = true;
        } else if (!on && switched[i]) {
          conf.setConfString(CONVERSIONS[i], "true");
          switched[i] = false;
        }
      }
      return plan;
    }
  }

  /**
   * Throws at a Hive table the window cannot apply to: one read by the native file source, or one
   * whose input format lists files itself instead of through {@code FileInputFormat.listStatus}
   * (Hive's OrcInputFormat, for one), so no path filter ever sees its files.
   */
  static final class ConvertedRelationVisitor extends AbstractFunction1<LogicalPlan, BoxedUnit> {
    @Override
    public BoxedUnit apply(LogicalPlan node) {
      if (node instanceof HiveTableRelation) {
        CatalogTable meta = ((HiveTableRelation) node).tableMeta();
        scala.Option<String> format = meta.storage().inputFormat();
        if (format.isDefined() && !listsThroughFileInputFormat(format.get())) {
          throw new IllegalStateException("trib mtime window: Hive table "
              + meta.identifier().unquotedString() + " is stored with " + format.get()
              + ", which lists its files itself and applies no path filter, so the window cannot "
              + "apply; read it with trib's exact file sets (trib files --window) instead");
        }
      }
      if (node instanceof LogicalRelation) {
        scala.Option<CatalogTable> table = ((LogicalRelation) node).catalogTable();
        if (table.isDefined() && table.get().provider().isDefined()
            && "hive".equalsIgnoreCase(table.get().provider().get())) {
          throw new IllegalStateException("trib mtime window: Hive table "
              + table.get().identifier().unquotedString() + " is read by Spark's native reader, "
              + "which does not apply the window; SET spark.sql.hive.convertMetastoreParquet=false"
              + " and spark.sql.hive.convertMetastoreOrc=false");
        }
      }
      return BoxedUnit.UNIT;
    }
  }

  static boolean listsThroughFileInputFormat(String className) {
    Class<?> cls;
    try {
      cls = Class.forName(className, false, Thread.currentThread().getContextClassLoader());
    } catch (ClassNotFoundException | LinkageError e) {
      return true; // Spark fails on its own, naming the class
    }
    return org.apache.hadoop.mapred.FileInputFormat.class.isAssignableFrom(cls)
        || org.apache.hadoop.mapreduce.lib.input.FileInputFormat.class.isAssignableFrom(cls);
  }

  /**
   * Created (so every class it needs is loaded) with the extension. The Spark Thrift Server closes
   * a session's class loader when the session ends; a class first needed later, in another session,
   * could then no longer be loaded from it.
   */
  static final ConvertedRelationVisitor VISITOR = new ConvertedRelationVisitor();

  static {
    MtimeWindow.syncOn(key -> null);
  }

  /**
   * Fails a plan that reads a Hive table through the native file source while sync is on, and one
   * that reads any table while the window's keys do not parse or conflict. SETs pass: they read no
   * table, and the SET that fixes a conflict must run.
   */
  static final class ConvertedTableCheck extends AbstractFunction1<LogicalPlan, BoxedUnit> {
    private final SparkSession session;

    ConvertedTableCheck(SparkSession session) {
      this.session = session;
    }

    @Override
    public BoxedUnit apply(LogicalPlan plan) {
      if (!syncOn(session)) {
        return BoxedUnit.UNIT;
      }
      plan.foreachWithSubqueries(VISITOR);
      if (!plan.collectWithSubqueries(READS).isEmpty()) {
        SQLConf conf = session.sessionState().conf();
        MtimeWindow.from(key -> conf.getConfString(key, null));
      }
      return BoxedUnit.UNIT;
    }
  }

  /** Matches the relations a query reads files through. */
  static final scala.PartialFunction<LogicalPlan, Boolean> READS =
      new scala.runtime.AbstractPartialFunction<LogicalPlan, Boolean>() {
        @Override
        public boolean isDefinedAt(LogicalPlan node) {
          return node instanceof HiveTableRelation || node instanceof LogicalRelation;
        }

        @Override
        public Boolean apply(LogicalPlan node) {
          return Boolean.TRUE;
        }
      };

  /** Throws at cached data in a plan: it holds what a read under some earlier window returned. */
  static final class CachedRelationVisitor extends AbstractFunction1<LogicalPlan, BoxedUnit> {
    @Override
    public BoxedUnit apply(LogicalPlan node) {
      if (node instanceof InMemoryRelation) {
        scala.Option<String> name = ((InMemoryRelation) node).cacheBuilder().tableName();
        String what = name.isDefined() ? "cached table " + name.get() : "a cached DataFrame";
        String undo = name.isDefined() ? "UNCACHE TABLE " + name.get() : "unpersist() it";
        throw new IllegalStateException("trib mtime window: the query reads " + what + ", whose rows "
            + "were read when it was cached, not through this window; " + undo + " (or CLEAR CACHE) "
            + "before reading it with sync on");
      }
      return BoxedUnit.UNIT;
    }
  }

  static final CachedRelationVisitor CACHED = new CachedRelationVisitor();

  /** The optimizer's input has cached data substituted: the one place it can be seen. */
  static final class CachedDataCheck extends Rule<LogicalPlan> {
    private final SparkSession session;

    CachedDataCheck(SparkSession session) {
      this.session = session;
    }

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
      if (syncOn(session)) {
        plan.foreachWithSubqueries(CACHED);
      }
      return plan;
    }
  }
}
