"""The emulator's machinery on the host: real OS processes, isolated.

Bubblewrap or plain launching, overlay layers, network namespaces, process trees and their
output journals, terminals, the guest agent, a sandbox's storage. Its doors: the standard
library and ``emulator._wire`` only; nothing here knows HTTP or records.
"""
