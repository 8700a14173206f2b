"""Maintainers' tools, each run as `python -m convqa.front.tools.NAME --help`: promoting and
exporting models, the result tables, answer comparisons, load tests, speed benchmarks and the
measurements behind the published defaults. They wire components together, so they live in the
front door; scripts/ keeps only thin shell drivers."""
