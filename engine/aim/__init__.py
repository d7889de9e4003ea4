"""The AIM lifecycles (seed 004), decided without I/O: model discovery, template resolution, service rollout.

Decides what an image says about its model, which profile a template resolves to, and the InferenceService,
HTTPRoute and status an AIMService renders.
"""
