"""Names and identities from outside: the naming rules every part applies to node, workload,
job and user names (:mod:`.names`), which node a series belongs to (:mod:`.node`), and who a
workload is: its kind, stable name and the label values users know it by (:mod:`.workload`).
"""
