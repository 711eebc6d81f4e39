"""The SimPy simulation of the RL loop. The only package that imports simpy."""
