-- Benchmark baseline: discovers key=value directories only.
MSCK REPAIR TABLE {table}
