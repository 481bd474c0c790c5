"""The scheduler extender: kube-scheduler asks it where each pod of a group goes."""
