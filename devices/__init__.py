"""ngb.devices — inventory, host keys, transports (local, ssh), probe, and the device-side agent.

The agent (``ngb.devices.agent``) is shipped to devices and may import only the standard library,
numpy, psutil and ``ngb.core``; a test enforces that.
"""
