-- Argo CD health of a Runway Workflow: Healthy once the operator has validated this
-- generation and offers its tool, Degraded when it refused it (the Ready condition's reason
-- and message say why), Progressing until the operator has looked at this generation,
-- Suspended while it is valid but paused (calls are taken; their Runs wait).
local hs = {}
if obj.status == nil or obj.status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the Runway operator to validate the Workflow"
  return hs
end
local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and observed ~= nil and observed < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the Runway operator to validate generation " .. generation
  return hs
end
for _, condition in ipairs(obj.status.conditions) do
  if condition.type == "Ready" then
    if condition.status == "True" and obj.spec ~= nil and obj.spec.suspend == true then
      hs.status = "Suspended"
      hs.message = "Paused: the Runs of new calls wait until it is resumed"
    elseif condition.status == "True" then
      hs.status = "Healthy"
      hs.message = "Offered as tool " .. (obj.status.tool or obj.metadata.name)
    elseif condition.status == "False" then
      hs.status = "Degraded"
      hs.message = (condition.reason or "NotReady") .. ": " .. (condition.message or "")
    else
      hs.status = "Progressing"
      hs.message = condition.message or "Validation pending"
    end
    return hs
  end
end
hs.status = "Progressing"
hs.message = "Waiting for the Runway operator to validate the Workflow"
return hs
