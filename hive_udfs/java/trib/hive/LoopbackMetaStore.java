// Serves Hive 2.3's metastore on one address (127.0.0.1 unless told) instead of on every interface.
//
// HiveMetaStore.startMetaStore opens its Thrift socket with HiveAuthUtils.getServerSocket(null, port),
// i.e. the wildcard address, and Hive 2.3 has no setting for the bind host. The project rule is that
// dev and test servers listen on loopback only, so tributary_read.hive_udfs.build compiles this file
// at first start (javac against the pyspark jars) and runs it in place of HiveMetaStore.
//
// It mirrors startMetaStore's unsecured path: the same HMSHandler behind RetryingHMSHandler, binary
// protocol with the configured message size limit, a thread pool sized by
// hive.metastore.server.{min,max}.threads. With hive.metastore.sasl.enabled=true it takes startMetaStore's
// secure branch instead (the secured test stack, tributary_read.services.secure_hive): a Kerberos login
// from hive.metastore.kerberos.{keytab.file,principal} through Hive's Thrift auth bridge, the delegation
// token manager started for the handler, a SASL (GSSAPI) transport factory with the metastore's SASL
// properties, and the bridge's processor that runs each call as the authenticated user. The JVM must be
// given -Djava.security.krb5.conf (Java ignores KRB5_CONFIG) and a core-site.xml on the classpath with
// hadoop.security.authentication=kerberos. Left out because our hive-site.xml turns them off:
// SSL, framed or compact transports, ACID compactor and housekeeping threads. It adds what an Iceberg
// commit's table lock needs: the lock tables schematool would have made (prepareLockTables), and the
// housekeeping's time-out of a dead holder's lock (startLockReaper).
// TSetIpAddressProcessor (stock HMS's choice when hive.metastore.execute.setugi=false) still
// answers clients' set_ugi calls; every call runs as this JVM's user, the same local user anyway.
//
// Usage: java -cp CONF:CLASSES:JARS/* trib.hive.LoopbackMetaStore PORT [HOST]
package trib.hive;

import java.lang.reflect.Field;
import java.net.InetSocketAddress;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.apache.hadoop.hive.common.LogUtils;
import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hadoop.hive.conf.HiveConf.ConfVars;
import org.apache.hadoop.hive.metastore.HiveMetaStore;
import org.apache.hadoop.hive.metastore.IHMSHandler;
import org.apache.hadoop.hive.metastore.MetaStoreUtils;
import org.apache.hadoop.hive.metastore.TSetIpAddressProcessor;
import org.apache.hadoop.hive.metastore.api.ThriftHiveMetastore;
import org.apache.hadoop.hive.metastore.txn.TxnDbUtil;
import org.apache.hadoop.hive.metastore.txn.TxnStore;
import org.apache.hadoop.hive.metastore.txn.TxnUtils;
import org.apache.hadoop.hive.shims.ShimLoader;
import org.apache.hadoop.hive.thrift.HadoopThriftAuthBridge;
import org.apache.hadoop.hive.thrift.HiveDelegationTokenManager;
import org.apache.thrift.TProcessor;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.server.TServer;
import org.apache.thrift.server.TThreadPoolServer;
import org.apache.thrift.transport.TServerSocket;
import org.apache.thrift.transport.TTransportFactory;

public final class LoopbackMetaStore {
  private LoopbackMetaStore() {}

  public static void main(String[] args) {
    try {
      if (args.length < 1 || args.length > 2) {
        throw new IllegalArgumentException("usage: LoopbackMetaStore PORT [HOST]");
      }
      serve(args.length == 2 ? args[1] : "127.0.0.1", Integer.parseInt(args[0]));
    } catch (Throwable t) {
      // Derby and DataNucleus leave non-daemon threads running: without exit() a failed start hangs.
      System.err.println("ERROR LoopbackMetaStore failed to start: " + t);
      t.printStackTrace();
      System.exit(1);
    }
  }

  private static void serve(String host, int port) throws Throwable {
    HiveConf.setLoadMetastoreConfig(true);
    HiveConf conf = new HiveConf(HiveMetaStore.HMSHandler.class);
    if (System.getProperty("log4j.configurationFile") == null) {
      try {
        LogUtils.initHiveLog4j(); // honours hive.log4j.file, as HiveMetaStore.main does
      } catch (LogUtils.LogInitializationException e) {
        System.err.println("WARN LoopbackMetaStore: " + e.getMessage());
      }
    }
    // HiveMetaStore.isMetaStoreRemote() must say true, as it does under HiveMetaStore.main.
    Field remote = HiveMetaStore.class.getDeclaredField("isMetaStoreRemote");
    remote.setAccessible(true);
    remote.setBoolean(null, true);

    // Handler first (it creates the Derby schema), socket second: an open port means ready.
    HiveMetaStore.HMSHandler baseHandler = new HiveMetaStore.HMSHandler("new db based metaserver", conf, false);
    IHMSHandler handler = HiveMetaStore.newRetryingHMSHandler(baseHandler, conf);
    prepareLockTables(conf);
    startLockReaper(conf);
    if (conf.getBoolVar(ConfVars.METASTORE_USE_THRIFT_SASL)) {
      serveSecure(host, port, conf, baseHandler, handler);
      return;
    }
    long maxMessageSize = conf.getLongVar(ConfVars.METASTORESERVERMAXMESSAGESIZE);
    TServerSocket socket = new TServerSocket(new InetSocketAddress(host, port));
    TServer server = new TThreadPoolServer(new TThreadPoolServer.Args(socket)
        .processor(new TSetIpAddressProcessor<IHMSHandler>(handler))
        .transportFactory(new TTransportFactory())
        .protocolFactory(new TBinaryProtocol.Factory())
        .inputProtocolFactory(new TBinaryProtocol.Factory(true, true, maxMessageSize, maxMessageSize))
        .minWorkerThreads(conf.getIntVar(ConfVars.METASTORESERVERMINTHREADS))
        .maxWorkerThreads(conf.getIntVar(ConfVars.METASTORESERVERMAXTHREADS)));
    System.out.println("LoopbackMetaStore started on " + host + ":" + port);
    System.out.flush();
    server.serve();
  }

  /** startMetaStore's useSasl branch, bound to {@code host}. */
  private static void serveSecure(String host, int port, HiveConf conf, HiveMetaStore.HMSHandler baseHandler,
                                  IHMSHandler handler) throws Throwable {
    HadoopThriftAuthBridge.Server saslServer = ShimLoader.getHadoopThriftAuthBridge().createServer(
        conf.getVar(ConfVars.METASTORE_KERBEROS_KEYTAB_FILE), conf.getVar(ConfVars.METASTORE_KERBEROS_PRINCIPAL));
    HiveDelegationTokenManager tokens = new HiveDelegationTokenManager();
    tokens.startDelegationTokenSecretManager(conf, baseHandler, HadoopThriftAuthBridge.Server.ServerMode.METASTORE);
    saslServer.setSecretManager(tokens.getSecretManager());
    // HMSHandler's get/renew/cancel_delegation_token and its UGI lookups read these statics, which
    // startMetaStore assigns: without them get_delegation_token (every Kerberos HS2 session) is an NPE.
    setStatic("useSasl", true);
    setStatic("saslServer", saslServer);
    setStatic("delegationTokenManager", tokens);
    TTransportFactory transportFactory =
        saslServer.createTransportFactory(MetaStoreUtils.getMetaStoreSaslProperties(conf));
    TProcessor processor = saslServer.wrapProcessor(new ThriftHiveMetastore.Processor<IHMSHandler>(handler));
    long maxMessageSize = conf.getLongVar(ConfVars.METASTORESERVERMAXMESSAGESIZE);
    TServerSocket socket = new TServerSocket(new InetSocketAddress(host, port));
    TServer server = new TThreadPoolServer(new TThreadPoolServer.Args(socket)
        .processor(processor)
        .transportFactory(transportFactory)
        .protocolFactory(new TBinaryProtocol.Factory())
        .inputProtocolFactory(new TBinaryProtocol.Factory(true, true, maxMessageSize, maxMessageSize))
        .minWorkerThreads(conf.getIntVar(ConfVars.METASTORESERVERMINTHREADS))
        .maxWorkerThreads(conf.getIntVar(ConfVars.METASTORESERVERMAXTHREADS)));
    System.out.println("LoopbackMetaStore started on " + host + ":" + port + ", SASL (Kerberos) enabled as "
        + conf.getVar(ConfVars.METASTORE_KERBEROS_PRINCIPAL));
    System.out.flush();
    server.serve();
  }

  /**
   * The metastore's lock tables (TXNS, HIVE_LOCKS, NEXT_LOCK_ID, ...) in an embedded-Derby metastore DB.
   *
   * <p>DataNucleus's autoCreateAll makes only the JDO tables; Hive's schematool makes these from
   * hive-txn-schema-2.3.0.derby.sql, which the pyspark wheel does not ship. Without them every lock call
   * (ThriftHiveMetastore.lock, which an Iceberg catalog's commit takes on its table, e.g. pyiceberg's
   * HiveCatalog) fails with "Table/View 'NEXT_LOCK_ID' does not exist". Hive's own TxnDbUtil holds the
   * same Derby DDL; it runs before the socket opens, so nothing can hold a lock yet: a DB whose last
   * table (WRITE_SET) is missing was never prepared, or a start died mid-way, and is made afresh.
   */
  private static void prepareLockTables(HiveConf conf) throws Exception {
    if (!conf.getVar(ConfVars.METASTORECONNECTURLKEY).startsWith("jdbc:derby:")) {
      return; // another database has its schema from schematool, lock tables included
    }
    String url = conf.getVar(ConfVars.METASTORECONNECTURLKEY);
    try (Connection c = DriverManager.getConnection(url);
         ResultSet rs = c.getMetaData().getTables(null, null, "WRITE_SET", null)) {
      if (rs.next()) {
        return;
      }
    }
    TxnDbUtil.cleanDb(conf);
    TxnDbUtil.prepDb(conf);
  }

  /**
   * Frees the locks whose holder stopped heartbeating longer than hive.txn.timeout ago (5 min by default),
   * every hive.timedout.txn.reaper.interval (3 min), as stock HMS's AcidHouseKeeperService does when
   * hive.compactor.initiator.on: a client killed between its lock and its unlock (an Iceberg commit) would
   * otherwise hold its table locked forever, the lock being a row in the Derby DB.
   */
  private static void startLockReaper(HiveConf conf) {
    long every = conf.getTimeVar(ConfVars.HIVE_TIMEDOUT_TXN_REAPER_INTERVAL, TimeUnit.MILLISECONDS);
    TxnStore store = TxnUtils.getTxnStore(conf);
    ScheduledExecutorService reaper = Executors.newSingleThreadScheduledExecutor(r -> {
      Thread t = new Thread(r, "trib-lock-reaper");
      t.setDaemon(true);
      return t;
    });
    reaper.scheduleWithFixedDelay(() -> {
      try {
        store.performTimeOuts();
      } catch (Throwable t) { // the next round tries again; a failure here must not end the thread
        System.err.println("WARN LoopbackMetaStore: timing out locks failed: " + t);
      }
    }, every, every, TimeUnit.MILLISECONDS);
  }

  private static void setStatic(String name, Object value) throws ReflectiveOperationException {
    Field f = HiveMetaStore.class.getDeclaredField(name);
    f.setAccessible(true);
    f.set(null, value);
  }
}
