"""Trace-driven simulation: replay requests through replicas under a policy and judge the outcome.

Decides what a policy would have done on a trace (replay, policies, the oracle and its frontier) and fits
performance profiles from measured windows (calibration).
"""
