-- Argo CD health check for groupwarden.io/ConsumerGroupPolicy (kstatus conditions).
-- Installed through argocd-cm (see argocd-cm-patch.yaml, which embeds this same script).
local hs = {}
if obj.status == nil or obj.status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator's first status"
  return hs
end
if obj.metadata.generation ~= nil and obj.status.observedGeneration ~= obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(obj.metadata.generation)
  return hs
end
local ready, reconciling, stalled
for _, c in ipairs(obj.status.conditions) do
  if c.type == "Ready" then ready = c end
  if c.type == "Reconciling" then reconciling = c end
  if c.type == "Stalled" then stalled = c end
end
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = (stalled.reason or "Stalled") .. ": " .. (stalled.message or "")
  return hs
end
if reconciling ~= nil and reconciling.status == "True" then
  hs.status = "Progressing"
  hs.message = (reconciling.reason or "Reconciling") .. ": " .. (reconciling.message or "")
  return hs
end
if ready ~= nil and ready.status == "True" then
  if ready.reason == "Suspended" then
    hs.status = "Suspended"
  else
    hs.status = "Healthy"
  end
  hs.message = (ready.reason or "Ready") .. ": " .. (ready.message or "")
  return hs
end
if ready ~= nil and ready.status == "False" then
  hs.status = "Degraded"
  hs.message = (ready.reason or "NotReady") .. ": " .. (ready.message or "")
  return hs
end
hs.status = "Progressing"
hs.message = "Waiting for the Ready condition"
return hs
