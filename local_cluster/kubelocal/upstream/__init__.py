"""The upstream control plane under the tests: etcd, kube-apiserver, kube-controller-manager and kube-scheduler
v1.37.2 built from their Go modules (`build`), with kubelocal's kubelet as their node."""
