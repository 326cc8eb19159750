"""mpcbench: the pipeline runtime (suite.pipeline), the benchmark runner (suite.bench) and the
torch-free record schema and network model both of them and the leaderboard read (suite.results)."""
