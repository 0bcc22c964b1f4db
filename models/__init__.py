"""The model zoo: representative edge models with random weights (`zoo.ZOO`, `zoo.BENCH_ONLY`), and
their PT2E-quantized forms (`quantized`). What the tests, the benchmarks, `make demo`, the
firmware and `etc.tools.import_model` compile; a package, so each imports it as `etc.models.zoo`."""
