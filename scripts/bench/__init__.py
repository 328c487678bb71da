"""The benchmarks (docs/performance.md says what each measures and the target): the build's, the index's pages for
people, `wheelwright serve` under load; and their helpers, which the tests use too (small labelled wheels, a site
of the release plan's shape). They import the product's public names only, never a test module."""
