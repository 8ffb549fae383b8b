-- publish: ARGV[1] now ('' = TIME), then (step, eta or '', payload) triples.
local now = clock(ARGV[1])
local rang = 0
for i = 2, #ARGV, 3 do
  rang = rang + put(now, ARGV[i], ARGV[i + 1], ARGV[i + 2])
end
if rang > 0 then ring() end
return #ARGV
