"""The static package index: PEP 503/691/658 pages per variant, a landing page, local serving and S3 publish.

templates/ holds the pages' jinja2 templates (autoescaped, rendered by render.py alone, from the models of
pages.py, landing.py and setups.py) and site.css/site.js, inlined into every page for people. Every file there is
part of the render digest: changing one renders every page again. simple_project.html is the reference for the
bytes render.py writes out in Python for speed (a unit test holds the two equal).

stage.py is the index's entry. A run that finds nothing moved imports only stage, quiet, inputs, report, state, code
and layout; those import nothing of the judging (catalog, twins, wheels), the records' blocks or the rendering, and
name such modules' types under TYPE_CHECKING only (tests/integration/test_cli_startup.py holds them to it)."""
