"""Problems found in a suite before anything runs, each naming file, step and field."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a suite. `step` and `field` are None when not about one."""

    file: str
    step: str | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = [self.file]
        if self.step is not None:
            where.append(f"step '{self.step}'")
        if self.field is not None:
            where.append(f"field '{self.field}'")
        return ": ".join(where) + ": " + self.message


class SuiteError(Exception):
    """Raised with every problem found, so a user fixes them in one go."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))
