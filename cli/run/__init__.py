"""The `ldpem run` command's helpers (``ldpem.commands.run`` is its front-end): the create request
and its plan, the hospitals' token files, the status reader, the estimate it ends with, cancel
and resume, and the one-line errors these share."""
