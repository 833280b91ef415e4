"""``trib hive up|status|down|beeline``: the local metastore + HiveServer2 pair for dev and tests.

Thin over :mod:`tributary_read.hive.services`, which owns the processes and their state.
"""

from __future__ import annotations

import click

from tributary_read.errors import MetastoreError
from tributary_read.services import hive as services

from .context import TribState, emit, json_option, metastore_option, pass_state

_DIR_HELP = "State dir: services.json, logs, Derby metastore_db, warehouse."
_NAMES = {"hms": "metastore", "hs2": "HiveServer2", "kdc": "KDC", "ldap": "slapd", "krb_hs2": "HiveServer2",
          "ldap_hs2": "HiveServer2"}


def _dir_option(f):
    return click.option("--dir", "dir_", default=".trib/hive", show_default=True,
                        type=click.Path(file_okay=False), help=_DIR_HELP)(f)


@click.group()
def hive() -> None:
    """Run a local Hive metastore + HiveServer2 (Spark Thrift Server) on 127.0.0.1."""


@hive.command()
@_dir_option
@click.option("--hms-port", default=9083, show_default=True, type=click.IntRange(1, 65535),
              help="Metastore Thrift port.")
@click.option("--hs2-port", default=10000, show_default=True, type=click.IntRange(1, 65535),
              help="HiveServer2 Thrift port.")
@click.option("--timeout", default=180.0, show_default=True, type=click.FloatRange(min=1),
              help="Seconds to wait until HiveServer2 answers SELECT 1.")
@click.option("--auth", type=click.Choice(["none", "ldap", "kerberos"]), default="none", show_default=True,
              help="none: the plain pair. ldap: HiveServer2 with LDAP logins over TLS (its own catalog); "
              "kerberos: a Kerberos HiveServer2 in front of a Kerberos (SASL) metastore. Both run a private "
              "KDC (realm TRIB.TEST) and the Kerberos metastore; see tributary_read/services/secure_hive.py.")
@json_option
def up(dir_, hms_port, hs2_port, timeout, auth, as_json) -> None:
    """Start the pair in the background (a no-op if it already runs from DIR)."""
    if auth != "none":
        return _up_secure(dir_, hms_port, hs2_port, timeout, auth, as_json)
    running = all(s["alive"] for s in services.status(dir_).values())
    if not running:  # stderr, so --json output stays parseable
        click.echo(f"trib: starting metastore and HiveServer2 in {dir_}, up to {timeout:g}s "
                   "(a first start also compiles the launcher and creates the schema)...", err=True)
    s = services.start(dir_, hms_port=hms_port, hs2_port=hs2_port, timeout=timeout)
    hs2 = f"{services.HOST}:{s.hs2_port}"
    data = {"dir": s.dir, "hms_port": s.hms_port, "hs2_port": s.hs2_port, "hms_pid": s.hms_pid,
            "hs2_pid": s.hs2_pid, "metastore_uri": s.metastore_uri, "hs2": hs2,
            "warehouse_dir": s.warehouse_uri, "already_running": running}

    def human() -> None:
        click.echo(f"{'already running' if running else 'started'} from {s.dir}")
        click.echo(f"  metastore    {s.metastore_uri}  (pid {s.hms_pid})")
        click.echo(f"  HiveServer2  {hs2}  (pid {s.hs2_pid})")
        click.echo("connect:")
        click.echo(f"  trib hive beeline --dir {dir_}    (or any beeline: -u jdbc:hive2://{hs2}/default -n trib)")
        click.echo(f"  python: pyhive.hive.connect(host='{services.HOST}', port={s.hs2_port}, "
                   "auth='NONE', username='trib')")
        click.echo(f"  spark:  --conf spark.hadoop.hive.metastore.uris={s.metastore_uri} "
                   f"--conf spark.sql.warehouse.dir={s.warehouse_uri}")
        click.echo(f"stop with: trib hive down --dir {dir_}")
    emit(as_json, data, human)


def _up_secure(dir_, hms_port, hs2_port, timeout, auth, as_json) -> None:
    """The secured pair: a user ``trib`` made for ``auth`` (a keytab, or an LDAP password in a 0600 file)."""
    from pathlib import Path

    from tributary_read.services import secure_hive, tls

    current = secure_hive.load(dir_)
    if current is None or current.auth != (auth,) or not secure_hive.running(current):
        click.echo(f"trib: starting a KDC, the Kerberos metastore and the {auth} HiveServer2 in {dir_}, up to "
                   f"{timeout:g}s...", err=True)
    ports = {"kerberos_hs2_port" if auth == "kerberos" else "ldap_hs2_port": hs2_port}
    s = secure_hive.start(dir_, auth=(auth,), hms_port=hms_port, timeout=timeout, **ports)
    clients = Path(s.dir) / "clients"
    clients.mkdir(mode=0o700, exist_ok=True)
    data = {"dir": s.dir, "auth": auth, "realm": s.realm, "krb5_conf": s.krb5_conf, "metastore_uri": s.metastore_uri,
            "hms_port": s.hms_port, "service_principal": s.service_principal, "pids": s.pids}
    if auth == "kerberos":
        keytab = clients / "trib.keytab"
        if not keytab.exists():
            s.kdc().add_principal("trib", keytab)
        data.update(hs2_port=s.kerberos_hs2_port, user=f"trib@{s.realm}", keytab=str(keytab),
                    jdbc_url=s.kerberos_jdbc_url(),
                    hs2_uri=f"hs2://localhost:{s.kerberos_hs2_port}/default?auth=KERBEROS")
    else:
        pw_file = clients / "trib.pw"
        if not pw_file.exists():
            import secrets

            password = secrets.token_urlsafe(12)
            s.ldap().add_user("trib", password)
            tls.write_secret(pw_file, password)
        data.update(hs2_port=s.ldap_hs2_port, user="trib", password_file=str(pw_file), ca_pem=s.ca_pem,
                    jdbc_url=s.ldap_jdbc_url(),
                    hs2_uri=f"hs2://localhost:{s.ldap_hs2_port}/default?auth=LDAP&user=trib&ssl=true"
                            f"&ssl_ca={s.ca_pem}&password_file={pw_file}")

    def human() -> None:
        click.echo(f"started ({auth}) from {s.dir}")
        click.echo(f"  metastore    {s.metastore_uri}  (principal {s.service_principal})")
        click.echo(f"  HiveServer2  localhost:{data['hs2_port']}  ({auth})")
        click.echo("connect:")
        if auth == "kerberos":
            click.echo(f"  export KRB5_CONFIG={s.krb5_conf}")
            click.echo(f"  trib --principal {data['user']} --keytab {data['keytab']} partitions sync ROOT "
                       f"--hive-table DB.TABLE --metastore '{data['hs2_uri']}'")
            click.echo(f"  (or the metastore's API: --metastore '{s.metastore_uri}')")
            click.echo(f"  export KRB5CCNAME=FILE:{clients / 'trib.cc'}")
            click.echo(f"  kinit -kt {data['keytab']} trib")
            click.echo(f"  python: pyhive.hive.connect(host='localhost', port={data['hs2_port']}, auth='KERBEROS', "
                       "kerberos_service_name='hive')")
            click.echo(f"  metastore: {s.metastore_uri}  (dial localhost: the service principal's host)")
        else:
            click.echo(f"  trib partitions sync ROOT --hive-table DB.TABLE --metastore '{data['hs2_uri']}'")
            click.echo(f"  beeline -u '{data['jdbc_url']}' -n trib -w {data['password_file']}")
            click.echo(f"  (CA certificate for other clients: {s.ca_pem})")
        click.echo(f"stop with: trib hive down --dir {dir_}")
    emit(as_json, data, human)


@hive.command()
@_dir_option
@json_option
def status(dir_, as_json) -> None:
    """Show pid, port and liveness of each service; exit 8 unless all are alive."""
    from tributary_read.services import secure_hive

    secured = secure_hive.load(dir_)  # a secured pair (trib hive up --auth) answers for itself
    st = secure_hive.status(secured) if secured is not None else services.status(dir_)
    alive = all(s["alive"] for s in st.values())

    def human() -> None:
        for key, s in st.items():
            where = f"pid {s['pid']}, port {s['port']}" if s["pid"] else "never started or stopped"
            click.echo(f"{_NAMES.get(key, key):<12} {'alive' if s['alive'] else 'NOT RUNNING':<12} {where}")
    emit(as_json, {"dir": dir_, "alive": alive, **st}, human)
    if not alive:
        raise click.exceptions.Exit(MetastoreError.exit_code)


@hive.command()
@_dir_option
@json_option
def down(dir_, as_json) -> None:
    """Stop both services (SIGTERM, then SIGKILL); a no-op if nothing runs from DIR."""
    from tributary_read.services import secure_hive

    was = {key: s["alive"] for key, s in services.status(dir_).items()}
    services.stop(dir_)
    secured = secure_hive.load(dir_)  # a secured pair (trib hive up --auth), if one runs from DIR
    if secured is not None:
        was["secured"] = secure_hive.running(secured)
        secure_hive.stop(secured)
    names = {**_NAMES, "secured": "the secured pair and its KDC"}
    emit(as_json, {"dir": dir_, "was_alive": was, "stopped": True},
         f"stopped ({', '.join(names[k] for k, v in was.items() if v) or 'nothing was running'})")


@hive.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@_dir_option
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def beeline(dir_, args) -> None:
    """Run beeline (the pyspark wheel's) on the local HiveServer2, from any shell; ARGS go to beeline.

    Without -u it connects to the pair running from DIR as user trib, e.g.
    trib hive beeline -e 'SHOW DATABASES'.
    """
    import os
    import sys

    argv = services.beeline_command(list(args), dir_)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)  # beeline owns the terminal, its exit status is ours


@hive.command("create-table")
@click.argument("table", required=False)
@click.option("--job", "job_file", type=click.Path(dir_okay=False),
              help="An ETL job file: the table is its [output], the Hive table and metastore its [hive], the "
              "columns its SQL's output (no committed files needed).")
@click.option("--schedule-time", help="With --job: the run whose input files the SQL is analysed over "
              "(default: now).")
@click.option("--hive-table", help="db.table to create (with --job: default its [hive] table).")
@metastore_option(note="Where to create the table (thrift:// through the metastore API, the others with SQL); "
                  "with --job: default its [hive] metastore.")
@click.option("--columns", help="Data columns, e.g. 'ts BIGINT, user STRING' (default: the job's SQL output "
              "with --job, else inferred from committed Parquet or JSON files).")
@click.option("--delimiter", default="\\t", show_default=True,
              help="Field delimiter of a text table (one character; \\t for tab).")
@click.option("--dry-run", is_flag=True, help="Print the DDL (over thrift://: marked as the equivalent of what the "
              "metastore API would create) and compare with an existing table; create nothing.")
@json_option
@pass_state
def create_table(state: TribState, table, job_file, schedule_time, hive_table, metastore, columns, delimiter,
                 dry_run, as_json) -> None:
    """Create the EXTERNAL Hive table matching TABLE's format, partitions and location (idempotent).

    \b
    trib hive create-table TABLE --hive-table db.t --metastore hs2://HOST:PORT
    trib hive create-table TABLE --hive-table db.t --metastore thrift://HOST:9083
    trib hive create-table --job hourly.toml        (before the job's first run)
    """
    from tributary_read.errors import InvalidInputError
    from tributary_read.hive.ddl import create_table as create, definition_for
    from tributary_read.hive.metastore import open_metastore
    from tributary_read.hive.model import TableName

    delim = {"\\t": "\t", "tab": "\t"}.get(delimiter, delimiter)
    if job_file:
        from tributary_read.etl.job import Job

        if table:
            raise InvalidInputError("give TABLE or --job, not both (the job's [output] is the table)")
        job = Job.load(job_file, state.config, state.storage_options)
        if job.hive is None and not (hive_table and metastore):
            raise InvalidInputError(f"{job_file} has no [hive] section: give --hive-table and --metastore")
        hive_table = hive_table or job.hive.table
        metastore = metastore or job.hive.metastore
        if columns:
            defn = definition_for(state.table(job.output.root), TableName.parse(hive_table), columns, delim)
        else:
            from dataclasses import replace

            from tributary_read.etl.run import hive_table_definition
            from tributary_read.etl.spec import HiveSpec

            job = replace(job, hive=HiveSpec(hive_table, metastore) if job.hive is None
                          else replace(job.hive, table=hive_table, metastore=metastore))
            defn = hive_table_definition(job, schedule_time)
    else:
        if not table:
            raise InvalidInputError("give TABLE (a trib table) or --job JOB.toml")
        if not hive_table or not metastore:
            raise InvalidInputError(f"give --{'hive-table' if not hive_table else 'metastore'} (or --job JOB.toml)")
        if schedule_time:
            raise InvalidInputError("--schedule-time goes with --job")
        defn = definition_for(state.table(table), TableName.parse(hive_table), columns, delim)
    with open_metastore(metastore) as ms:
        result = create(ms, defn, dry_run=dry_run)

    def human() -> None:
        if result["exists"]:
            click.echo(f"{result['table']} exists and matches (unchanged)")
            return
        how = ""
        if result["ddl_is_equivalent"]:  # no SQL ran or runs: say so on stdout, as a SQL comment
            click.echo(f"-- {'would be created' if dry_run else 'created'} through the metastore API "
                       f"(create_table) of {result['metastore']}, not as SQL; the equivalent DDL:")
            how = " through the metastore API"
        click.echo(result["ddl"] + ";")
        click.echo(f"{'would create' if dry_run else 'created'} {result['table']}{how}", err=True)
    emit(as_json, result, human)


COMMANDS = [hive]
