"""Prefect flows: wiring only; stages live in tasks/."""
