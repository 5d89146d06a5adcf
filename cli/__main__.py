from __future__ import annotations

from ldpem.cli import main

raise SystemExit(main())
