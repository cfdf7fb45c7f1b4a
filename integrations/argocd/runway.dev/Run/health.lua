-- Argo CD health of a Runway Run: Progressing while it is pending, queued, running or being
-- cancelled, Suspended while it waits for someone's answer or is paused, Healthy when it succeeded,
-- Degraded when it failed or was cancelled. Answers and arguments are never shown.
local hs = {}
local phase = obj.status and obj.status.phase or "Pending"
local terminal = phase == "Succeeded" or phase == "Failed" or phase == "Cancelled"
if not terminal and obj.status ~= nil and obj.status.paused ~= nil then
  hs.status = "Suspended"
  hs.message = obj.status.statusMessage or "Paused"
elseif phase == "Succeeded" then
  hs.status = "Healthy"
  hs.message = "Run succeeded"
elseif phase == "Failed" then
  hs.status = "Degraded"
  hs.message = obj.status.statusMessage or "Run failed"
elseif phase == "Cancelled" then
  hs.status = "Degraded"
  hs.message = "Run cancelled"
elseif phase == "Waiting" then
  hs.status = "Suspended"
  hs.message = "Waiting for input"
elseif phase == "Queued" then
  hs.status = "Progressing"
  hs.message = "Queued behind the Workflow's concurrency limit"
elseif phase == "Cancelling" then
  hs.status = "Progressing"
  hs.message = "Cancelling"
elseif phase == "Running" then
  hs.status = "Progressing"
  if obj.status.currentStep ~= nil then
    hs.message = "Running step " .. obj.status.currentStep
  else
    hs.message = "Running"
  end
else
  hs.status = "Progressing"
  hs.message = "Waiting for the Runway operator to start the Run"
end
return hs
