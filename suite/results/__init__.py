"""results: the torch-free record schema, network model and store location shared by the runner and the leaderboard."""

DEFAULT_STORE = "results/store.jsonl"  # the results store, relative to where a command starts
