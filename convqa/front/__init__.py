"""The front door: what wires the core and the components together for a user.

`cli` (the `convqa` command), `serve` (the HTTP API), `evaluation` (benchmark drivers and
tables), `embedded` (the default vital-article collection) and `prebuilt_index` (its shipped
vectors). Imports point down only: this package uses the core (the rest of `convqa`) and the
components (`retrievers`, `readers`, `phrase_index`); none of them imports it
(tests/test_layering.py).
"""
