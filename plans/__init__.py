"""SQL -> conjunctive query -> classification -> plan (join tree, triangle views, GHD)
-> operator DAG and explain text; imports ``core`` only."""
