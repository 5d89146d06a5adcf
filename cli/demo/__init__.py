"""The `ldpem demo` command's helpers (``ldpem.commands.demo`` is its front-end): the run on one
machine (``runner``), its coordinator and agents forked from this interpreter (``forkstart``),
the run followed as it goes (``follow``) and its convergence figure (``plot``)."""
