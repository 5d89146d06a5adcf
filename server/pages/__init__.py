"""The coordinator's HTML status pages (``/status``): the index and run pages
(``status.py``), their charts (``charts.py``), a secure-aggregation round's cells
(``secagg.py``), the SVG drawing (``svg.py``, ``svgintervals.py``) and the HTML helpers
(``kit.py``). No JavaScript, no plotting library."""
