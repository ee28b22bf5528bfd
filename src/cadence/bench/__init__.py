"""`cadence bench`: side-by-side measurements against the tools people already use.

Each benchmark saves JSON (with the command, date and machine), a PNG and a printed table.
"""
