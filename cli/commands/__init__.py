"""The ``ldpem`` command's front-ends, one module per subcommand; the library they drive
(``ldpem.common``, ``ldpem.server``, ``ldpem.client``, the commands' helper packages
``ldpem.run``, ``ldpem.demo`` and ``ldpem.experiment``, and ``ldpem.processes`` beside this
package) holds no argument parsing.

Each module states its subcommand as data — ``NAME``, ``HELP``, ``EXAMPLES`` and, unless
its docstring is the description, ``DESCRIPTION`` — and fills its parser in
``add_arguments``, which also sets the ``handler`` that runs it (``ldpem.cli`` builds the
parsers; tests/cli/test_help_tree.py checks every help text and example).
"""

from __future__ import annotations
