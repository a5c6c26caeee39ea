# publish.rb -- Bunny as its documentation shows: Bunny.new(uri).start,
# create_channel, confirm_select, exchange#publish with headers, then
# wait_for_confirms. Bunny writes every Integer as 'l', a Float as 'd', a
# Time as a timestamp in seconds. Protocol: see run_client.py.
require 'bunny'

ex_name = ENV.fetch('DB_EXCHANGE')
rk = ENV.fetch('DB_RK')
puts "VERSION #{Bunny::VERSION}"

conn = Bunny.new(ENV.fetch('DB_URI'))
conn.start
ch = conn.create_channel
ch.confirm_select
# the bridge declared the ingress exchange (fanout, durable): use it as it is
x = Bunny::Exchange.new(ch, :fanout, ex_name, durable: true, no_declare: true)

def now_ms = (Time.now.to_r * 1000).floor
now = now_ms
due_s = now / 1000 + 3
cases = [
  ['int', { 'x-delay' => 1500 }, 'delay:1500'],                    # 'l'
  ['float', { 'x-delay' => 1500.7 }, 'delay:1500'],                # 'd'
  ['string', { 'x-delay' => '1500' }, 'delay:1500'],
  ['big', { 'x-delay' => 5_000_000_000 }, 'dlx:x-delay above max_delay_ms'],
  ['until-time', { 'x-delay-until' => Time.at(due_s) }, "due:#{due_s * 1000}"], # 'T'
  ['until-iso', { 'x-delay-until' => Time.at(Rational(now + 2500, 1000)).utc.strftime('%Y-%m-%dT%H:%M:%S.%LZ') },
   "due:#{now + 2500}"],
  ['until-ms', { 'x-delay-until' => now + 2000 }, "due:#{now + 2000}"],
  ['negative', { 'x-delay' => -1 }, 'now'],
  ['bad', { 'x-delay' => 'soon' }, 'dlx:invalid x-delay']
]
sent = []
cases.each do |id, headers, expect|
  t = now_ms
  x.publish(id, routing_key: rk, message_id: id, mandatory: true,
                headers: headers.merge('x-client' => 'bunny'))
  sent << "SENT #{id} #{t} #{expect}"
end
abort 'a publish was nacked' unless ch.wait_for_confirms
puts sent
conn.close
