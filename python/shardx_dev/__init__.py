"""ShardX's development harness, kept out of the user package ``shardx``:
the model zoo (``zoo``, ``zoo_dtensor``), the traced examples and test
programs (``examples``, ``models``) and the layout/program sweeps
(``testing``). The test suite, the benchmarks and ``scripts/`` use it from
the checkout (``python/`` on ``sys.path``); ``pip install .`` does not
install it."""
