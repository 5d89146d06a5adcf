"""The `ldpem experiment` command's helpers (``ldpem.commands.experiment`` is its front-end):
the studies behind the paper's figures (``runner``), their data sets (``data``) and the figures
(``figures``)."""
