"""The public neighbour graphs of SecAgg+ (docs/SECAGG_GRAPH.md): the Harary graph, its
committee and seed (``harary.py``), the expander of random Hamiltonian cycles
(``cycles.py``), and their degree and thresholds from the tolerated corruption and dropout
(``parameters.py`` for the Harary graph, ``expander.py`` for the expander). Pure and
deterministic: the holders and the aggregator compute the same graph from public values."""
