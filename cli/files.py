"""``trib files``: print the exact file set a run should read."""

from __future__ import annotations

import click

from tributary_read.resolve import manifest_files

from .context import TribState, emit, json_option, pass_state


@click.command()
@click.argument("root")
@click.option("--mode", type=click.Choice(["manifest"]), default="manifest", show_default=True)
@click.option("--since-version", type=int, default=0, help="Exclusive lower bound on commit versions.")
@click.option("--until-version", type=int, help="Inclusive upper bound (default: latest).")
@click.option("--uri/--relative", "as_uri", default=False, help="Print full URIs instead of ROOT-relative paths.")
@json_option
@pass_state
def files(state: TribState, root, mode, since_version, until_version, as_uri, as_json) -> None:
    """Print the committed files of ROOT, one per line."""
    t = state.table(root)
    fs = manifest_files(t, since_version, until_version)

    def human():
        for f in fs.files:
            click.echo(t.storage.uri_for(f.path) if as_uri else f.path)
    emit(as_json, fs.to_json(), human)
