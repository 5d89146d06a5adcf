"""The hospital tokens ``ldpem run create --tokens-dir DIR`` writes: one file per enrolled
hospital, DIR/<hospital>.token (mode 600), checked before the run exists so that a created
run never ends with a token lost."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ldpem.common.core.errors import UserError
from ldpem.secretfiles import write_secret

__all__ = ["check_token_files", "write_token_files"]


def _token_path(directory: Path, hospital: str) -> Path:
    """DIR/<hospital>.token."""
    return directory / f"{hospital}.token"


def check_token_files(directory: Path, request: Any) -> None:
    """Before the run exists: refuse a token file that would be overwritten, so that a
    created run never ends with a token lost."""
    hospitals = request.get("hospitals") if isinstance(request, dict) else None
    for hospital in hospitals if isinstance(hospitals, list) else []:
        name = hospital.get("name") if isinstance(hospital, dict) else None
        if isinstance(name, str) and "token" not in hospital:
            path = _token_path(directory, name)
            if path.exists():
                raise UserError(f"{path}: exists; refusing to overwrite a token file")


def write_token_files(
    directory: Path, tokens: list[dict[str, str]], request: dict[str, Any]
) -> dict[str, Path | None]:
    """Hospital name → the token file written for it (None: its token was in the request)."""
    enrolled = [str(h["name"]) for h in request["hospitals"]]
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"{directory}: cannot create ({error.strerror})") from None
    files: dict[str, Path | None] = dict.fromkeys(enrolled)
    for entry in tokens:
        name = entry["name"]
        if name not in files:  # only names this request enrolled become file names
            raise UserError(f"the coordinator returned a token for {name!r}, not enrolled")
        path = _token_path(directory, name)
        write_secret(path, entry["token"] + "\n", f"token of hospital {name}")
        files[name] = path
    return files
