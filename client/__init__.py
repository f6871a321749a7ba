"""envad client: library and `envad` CLI for scoring, backfill and retraining jobs."""
