"""Strict query strings: a parameter a route does not take is a 422 naming the valid ones.

A misspelt `groupby=team` is refused rather than ignored: ignored, it would give the fleet
total, which reads as an answer. Routers opt in with
`dependencies=[Depends(reject_unknown)]`; the valid names are read from the route's own
signature, so a new parameter never needs listing twice.
"""

from __future__ import annotations

import difflib
from typing import Any

from fastapi import Request

from service.errors import Unprocessable


def valid_names(request: Request) -> list[str]:
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    return list(dict.fromkeys(_query_names(dependant))) if dependant is not None else []


def _query_names(dependant: Any) -> list[str]:
    names = [p.alias for p in dependant.query_params]
    for sub in dependant.dependencies:
        names.extend(_query_names(sub))
    return names


async def reject_unknown(request: Request) -> None:
    valid = valid_names(request)
    unknown = [k for k in dict.fromkeys(request.query_params.keys()) if k not in valid]
    if not unknown:
        return
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, valid, n=1)
        hints.append(f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name))
    takes = ", ".join(valid) if valid else "none"
    raise Unprocessable(f"unknown query parameter {', '.join(hints)}; "
                        f"{request.url.path} takes: {takes}")
