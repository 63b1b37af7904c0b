"""The data dictionary of a CSV file the report writes: ``<name>.columns.csv`` beside
``<name>.csv``, one row per column of the CSV file, ``column,meaning``; plain CSV, so that
``pandas.read_csv("comparison.columns.csv", index_col="column")`` reads it as the CSV file
itself is read."""

import csv
from pathlib import Path

__all__ = ["write_columns"]


def write_columns(path, columns, meanings):
    """Write the data dictionary of the CSV file ``path`` beside it, as
    ``<stem>.columns.csv``: one row per entry of ``columns`` (its columns, the index's
    first), ``column,meaning``, the meaning from ``meanings`` (a ``KeyError`` for a column
    without one). Returns the dictionary's path."""
    path = Path(path)
    target = path.with_name(f"{path.stem}.columns.csv")
    with open(target, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["column", "meaning"])
        for column in columns:
            writer.writerow([column, meanings[column]])
    return target
