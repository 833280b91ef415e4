"""OpenLineage events for trib's runs (issue 31, part 1; work in progress): what a run read, exactly, and
what it committed. Building an event imports nothing; sending one imports openlineage-python, the
``[lineage]`` extra, and only when a transport is configured."""
