"""Protobuf field numbers of the Kubernetes API types the emulator speaks in protobuf.

Facts carried over from the `generated.proto` files of k8s.io/api (core/v1, apps/v1, batch/v1, rbac/v1,
coordination/v1, scheduling/v1, authorization/v1, authentication/v1) and k8s.io/apimachinery (meta/v1),
Kubernetes 1.34-1.37, read from
github.com/kubernetes/kubernetes (staging/src/k8s.io/api/*/generated.proto). Only the numbers are
listed here; field types come from Kubernetes' published OpenAPI schemas (`schema.core_definitions`),
since go-to-protobuf names every proto field after its JSON name. Checked field by field against
upstream on 2026-11-25 (none wrong); `tests/emulator/test_protobuf_numbers.py` pins a sample per group.

One line per message, indented lines continue it: `group.version.Message: field field:N ^inlined ...`.
A bare field takes the next
number after the previous one; `field:N` sets it; `^field` is an embedded struct whose fields JSON shows
inline (`^handler@ProbeHandler` names its message when that is not the capitalised field name);
`=Other` copies another message's fields; a `+` after the name adds fields to a message already listed.
Volume sources other than the common ones (hostPath, emptyDir, secret, configMap, projected,
downwardAPI, persistentVolumeClaim) are left out on purpose: a body that uses them is refused with a
415, never silently truncated.
"""

SPEC = """
core.v1.Affinity: nodeAffinity podAffinity podAntiAffinity
core.v1.Capabilities: add drop
core.v1.ClientIPConfig: timeoutSeconds
core.v1.ConfigMap: metadata immutable:4 data:2 binaryData:3
core.v1.ConfigMapEnvSource: ^localObjectReference optional
core.v1.ConfigMapKeySelector: ^localObjectReference key optional
core.v1.ConfigMapProjection: ^localObjectReference items optional:4
core.v1.ConfigMapVolumeSource: ^localObjectReference items defaultMode optional
core.v1.Container: name image command args workingDir ports envFrom:19 env:7 resources:8 resizePolicy:23
    restartPolicy:24 restartPolicyRules:25 volumeMounts:9 volumeDevices:21 livenessProbe:10 readinessProbe:11
    startupProbe:22 lifecycle:12 terminationMessagePath:13 terminationMessagePolicy:20 imagePullPolicy:14
    securityContext:15 stdin:16 stdinOnce:17 tty:18
core.v1.ContainerPort: name hostPort containerPort protocol hostIP
core.v1.ContainerResizePolicy: resourceName restartPolicy
core.v1.ContainerRestartRule: action exitCodes
core.v1.ContainerRestartRuleOnExitCodes: operator values
core.v1.ContainerState: waiting running terminated
core.v1.ContainerStateRunning: startedAt
core.v1.ContainerStateTerminated: exitCode signal reason message startedAt finishedAt containerID
core.v1.ContainerStateWaiting: reason message
core.v1.ContainerStatus: name state lastState ready restartCount image imageID containerID started
    allocatedResources resources volumeMounts user allocatedResourcesStatus stopSignal
core.v1.ContainerUser: linux
core.v1.DownwardAPIProjection: items
core.v1.DownwardAPIVolumeFile: path fieldRef resourceFieldRef mode
core.v1.DownwardAPIVolumeSource: items defaultMode
core.v1.EmptyDirVolumeSource: medium sizeLimit
core.v1.EndpointAddress: ip hostname:3 nodeName:4 targetRef:2
core.v1.EndpointPort: name port protocol appProtocol
core.v1.EndpointSubset: addresses notReadyAddresses ports
core.v1.Endpoints: metadata subsets
core.v1.EnvFromSource: prefix configMapRef secretRef
core.v1.EnvVar: name value valueFrom
core.v1.EnvVarSource: fieldRef resourceFieldRef configMapKeyRef secretKeyRef fileKeyRef
core.v1.EphemeralContainer: ^ephemeralContainerCommon targetContainerName
core.v1.EphemeralContainerCommon: =core.v1.Container
core.v1.Event: metadata involvedObject reason message source firstTimestamp lastTimestamp count type eventTime
    series action related reportingComponent reportingInstance
core.v1.EventSeries: count lastObservedTime
core.v1.EventSource: component host
core.v1.ExecAction: command
core.v1.FileKeySelector: volumeName path key optional
core.v1.GRPCAction: port service
core.v1.HTTPGetAction: path port host scheme httpHeaders
core.v1.HTTPHeader: name value
core.v1.HostAlias: ip hostnames
core.v1.HostIP: ip
core.v1.HostPathVolumeSource: path type
core.v1.PodOS: name
core.v1.PodReadinessGate: conditionType
core.v1.PodResourceClaim: name resourceClaimName:3 resourceClaimTemplateName:4
core.v1.PodResourceClaimStatus: name resourceClaimName
core.v1.PodSchedulingGate: name
core.v1.PodSecurityContext: seLinuxOptions windowsOptions:8 runAsUser:2 runAsGroup:6 runAsNonRoot:3
    supplementalGroups:4 supplementalGroupsPolicy:12 fsGroup:5 sysctls:7 fsGroupChangePolicy:9 seccompProfile:10
    appArmorProfile:11 seLinuxChangePolicy:13
core.v1.PodSpec: volumes initContainers:20 containers:2 ephemeralContainers:34 restartPolicy:3
    terminationGracePeriodSeconds activeDeadlineSeconds dnsPolicy nodeSelector serviceAccountName serviceAccount
    automountServiceAccountToken:21 nodeName:10 hostNetwork hostPID hostIPC shareProcessNamespace:27
    securityContext:14 imagePullSecrets hostname subdomain affinity schedulerName tolerations:22 hostAliases
    priorityClassName priority dnsConfig readinessGates:28 runtimeClassName enableServiceLinks preemptionPolicy
    overhead topologySpreadConstraints setHostnameAsFQDN:35 os hostUsers schedulingGates resourceClaims resources
    hostnameOverride workloadRef
core.v1.PodStatus: observedGeneration:17 phase:1 conditions message reason hostIP podIP startTime
    containerStatuses qosClass initContainerStatuses nominatedNodeName podIPs ephemeralContainerStatuses resize
    resourceClaimStatuses hostIPs
core.v1.PodStatus+: extendedResourceClaimStatus:18 allocatedResources:19 resources:20
core.v1.PodTemplateSpec: metadata spec
core.v1.PortStatus: port protocol error
core.v1.PreferredSchedulingTerm: weight preference
core.v1.Probe: ^handler@ProbeHandler initialDelaySeconds timeoutSeconds periodSeconds successThreshold
    failureThreshold terminationGracePeriodSeconds
core.v1.ProbeHandler: exec httpGet tcpSocket grpc
core.v1.ProjectedVolumeSource: sources defaultMode
core.v1.ResourceRequirements: limits requests claims
core.v1.ResourceClaim: name request
core.v1.SELinuxOptions: user role type level
core.v1.SeccompProfile: type localhostProfile
core.v1.AppArmorProfile: type localhostProfile
core.v1.Secret: metadata immutable:5 data:2 stringData:4 type:3
core.v1.SecretEnvSource: ^localObjectReference optional
core.v1.SecretKeySelector: ^localObjectReference key optional
core.v1.SecretProjection: ^localObjectReference items optional:4
core.v1.SecretReference: name namespace
core.v1.SecretVolumeSource: secretName items defaultMode optional
core.v1.SecurityContext: capabilities privileged seLinuxOptions windowsOptions:10 runAsUser:4 runAsGroup:8
    runAsNonRoot:5 readOnlyRootFilesystem:6 allowPrivilegeEscalation:7 procMount:9 seccompProfile:11
    appArmorProfile:12
core.v1.Service: metadata spec status
core.v1.ServiceAccount: metadata secrets imagePullSecrets automountServiceAccountToken
core.v1.ServiceAccountTokenProjection: audience expirationSeconds path
core.v1.ServicePort: name protocol appProtocol:6 port:3 targetPort:4 nodePort:5
core.v1.ServiceSpec: ports selector clusterIP type externalIPs sessionAffinity:7 loadBalancerIP
    loadBalancerSourceRanges externalName externalTrafficPolicy healthCheckNodePort publishNotReadyAddresses
    sessionAffinityConfig ipFamilyPolicy:17 clusterIPs:18 ipFamilies:19 allocateLoadBalancerNodePorts:20
    loadBalancerClass internalTrafficPolicy trafficDistribution
core.v1.ServiceStatus: loadBalancer conditions
core.v1.LoadBalancerStatus: ingress
core.v1.LoadBalancerIngress: ip hostname ipMode ports
core.v1.SessionAffinityConfig: clientIP
core.v1.KeyToPath: key path mode
core.v1.PersistentVolumeClaimVolumeSource: claimName readOnly
core.v1.Volume: name ^volumeSource
core.v1.VolumeSource: hostPath emptyDir secret:6 persistentVolumeClaim:10 downwardAPI:16 configMap:19 projected:26
core.v1.VolumeProjection: secret downwardAPI configMap serviceAccountToken
core.v1.VolumeMount: name readOnly mountPath subPath mountPropagation subPathExpr recursiveReadOnly
core.v1.VolumeDevice: name devicePath
core.v1.Lifecycle: postStart preStop stopSignal
core.v1.LifecycleHandler: exec httpGet tcpSocket sleep
core.v1.SleepAction: seconds
core.v1.TCPSocketAction: port host
core.v1.ObjectFieldSelector: apiVersion fieldPath
core.v1.ResourceFieldSelector: containerName resource divisor
core.v1.LocalObjectReference: name
core.v1.ObjectReference: kind namespace name uid apiVersion resourceVersion fieldPath
core.v1.Toleration: key operator value effect tolerationSeconds
core.v1.TopologySpreadConstraint: maxSkew topologyKey whenUnsatisfiable labelSelector minDomains
    nodeAffinityPolicy nodeTaintsPolicy matchLabelKeys
core.v1.NodeAffinity: requiredDuringSchedulingIgnoredDuringExecution preferredDuringSchedulingIgnoredDuringExecution
core.v1.NodeSelector: nodeSelectorTerms
core.v1.NodeSelectorTerm: matchExpressions matchFields
core.v1.NodeSelectorRequirement: key operator values
core.v1.PodAffinity: requiredDuringSchedulingIgnoredDuringExecution preferredDuringSchedulingIgnoredDuringExecution
core.v1.PodAntiAffinity: requiredDuringSchedulingIgnoredDuringExecution
    preferredDuringSchedulingIgnoredDuringExecution
core.v1.PodAffinityTerm: labelSelector namespaces topologyKey namespaceSelector matchLabelKeys mismatchLabelKeys
core.v1.WeightedPodAffinityTerm: weight podAffinityTerm
core.v1.PodDNSConfig: nameservers searches options
core.v1.PodDNSConfigOption: name value
core.v1.PodCondition: type status lastProbeTime lastTransitionTime reason message observedGeneration
core.v1.PodIP: ip
core.v1.Pod: metadata spec status
core.v1.Sysctl: name value
core.v1.WindowsSecurityContextOptions: gmsaCredentialSpecName gmsaCredentialSpec runAsUserName hostProcess
core.v1.LinuxContainerUser: uid gid supplementalGroups
core.v1.VolumeMountStatus: name mountPath readOnly recursiveReadOnly
core.v1.Namespace: metadata spec status
core.v1.NamespaceSpec: finalizers
core.v1.NamespaceStatus: phase conditions
core.v1.NamespaceCondition: type status lastTransitionTime:4 reason message
meta.v1.ObjectMeta: name generateName namespace selfLink uid resourceVersion generation creationTimestamp
    deletionTimestamp deletionGracePeriodSeconds labels annotations ownerReferences finalizers managedFields:17
meta.v1.ListMeta: selfLink resourceVersion continue remainingItemCount
meta.v1.OwnerReference: kind name:3 uid apiVersion controller blockOwnerDeletion
meta.v1.ManagedFieldsEntry: manager operation apiVersion time fieldsType:6 fieldsV1 subresource
meta.v1.LabelSelector: matchLabels matchExpressions
meta.v1.LabelSelectorRequirement: key operator values
meta.v1.Status: metadata status message reason details code
meta.v1.StatusDetails: name group kind causes retryAfterSeconds uid
meta.v1.StatusCause: reason message field
meta.v1.DeleteOptions: gracePeriodSeconds preconditions orphanDependents propagationPolicy dryRun
    ignoreStoreReadErrorWithClusterBreakingPotential
meta.v1.Preconditions: uid resourceVersion
apps.v1.Deployment: metadata spec status
apps.v1.DeploymentSpec: replicas selector template strategy minReadySeconds revisionHistoryLimit paused
    progressDeadlineSeconds:9
apps.v1.DeploymentStrategy: type rollingUpdate
apps.v1.RollingUpdateDeployment: maxUnavailable maxSurge
apps.v1.DeploymentStatus: observedGeneration replicas updatedReplicas availableReplicas:4 unavailableReplicas:5
    conditions:6 readyReplicas:7 collisionCount:8 terminatingReplicas:9
apps.v1.DeploymentCondition: type status reason:4 message:5 lastUpdateTime:6 lastTransitionTime:7
apps.v1.ReplicaSet: metadata spec status
apps.v1.ReplicaSetSpec: replicas selector template minReadySeconds
apps.v1.ReplicaSetStatus: replicas fullyLabeledReplicas observedGeneration readyReplicas availableReplicas
    conditions terminatingReplicas
apps.v1.ReplicaSetCondition: type status lastTransitionTime reason message
batch.v1.Job: metadata spec status
batch.v1.JobSpec: parallelism completions activeDeadlineSeconds selector manualSelector template backoffLimit
    ttlSecondsAfterFinished completionMode suspend podFailurePolicy backoffLimitPerIndex maxFailedIndexes
    podReplacementPolicy managedBy successPolicy
batch.v1.JobStatus: conditions startTime completionTime active succeeded failed completedIndexes
    uncountedTerminatedPods ready failedIndexes terminating
batch.v1.JobCondition: type status lastProbeTime lastTransitionTime reason message
batch.v1.UncountedTerminatedPods: succeeded failed
rbac.v1.Role: metadata rules
rbac.v1.ClusterRole: metadata rules aggregationRule
rbac.v1.AggregationRule: clusterRoleSelectors
rbac.v1.PolicyRule: verbs apiGroups resources resourceNames nonResourceURLs
rbac.v1.RoleBinding: metadata subjects roleRef
rbac.v1.ClusterRoleBinding: metadata subjects roleRef
rbac.v1.Subject: kind apiGroup name namespace
rbac.v1.RoleRef: apiGroup kind name
coordination.v1.Lease: metadata spec
coordination.v1.LeaseSpec: holderIdentity leaseDurationSeconds acquireTime renewTime leaseTransitions strategy
    preferredHolder
scheduling.v1.PriorityClass: metadata value globalDefault description preemptionPolicy
authorization.v1.SelfSubjectAccessReview: metadata spec status
authorization.v1.SelfSubjectAccessReviewSpec: resourceAttributes nonResourceAttributes
authorization.v1.SubjectAccessReview: metadata spec status
authorization.v1.LocalSubjectAccessReview: metadata spec status
authorization.v1.SubjectAccessReviewSpec: resourceAttributes nonResourceAttributes user:3 groups uid:6
authorization.v1.ResourceAttributes: namespace verb group version resource subresource name
authorization.v1.NonResourceAttributes: path verb
authorization.v1.SubjectAccessReviewStatus: allowed reason:2 evaluationError:3 denied:4
authorization.v1.SelfSubjectRulesReview: metadata spec status
authorization.v1.SelfSubjectRulesReviewSpec: namespace
authorization.v1.SubjectRulesReviewStatus: resourceRules nonResourceRules incomplete evaluationError
authorization.v1.ResourceRule: verbs apiGroups resources resourceNames
authorization.v1.NonResourceRule: verbs nonResourceURLs
authentication.v1.SelfSubjectReview: metadata status
authentication.v1.SelfSubjectReviewStatus: userInfo
authentication.v1.UserInfo: username uid groups
authentication.v1.TokenRequest: metadata spec status
authentication.v1.TokenRequestSpec: audiences expirationSeconds:4 boundObjectRef:3
authentication.v1.TokenRequestStatus: token expirationTimestamp
authentication.v1.BoundObjectReference: kind apiVersion name uid
"""
