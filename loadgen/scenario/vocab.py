"""Built-in English word lists for the prompt generators (no downloaded corpora)."""

from __future__ import annotations


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


NOUNS = _words("""
    account acid actor advice age agent air airport alarm album answer apple archive area arm
    army art artist aspect atom author autumn baby badge bag baker ball band bank bar barrel
    base basket battery beach beam bean bear bed bell belt bench bicycle bird birth blade
    blanket block board boat body bone book border bottle bottom box branch bread bridge
    brother brush bucket budget bullet bundle butter button cabin cable cake camera camp canal
    candle canvas captain car card cargo carpet case castle cat cause cell chain chair chalk
    channel chapter chart cheese chest chief child circle city clerk client cliff clock cloud
    coast coat code coin collar colony column comet copper corner cotton council country
    course cousin crane credit crew crowd crystal cup curtain cushion customer cycle dancer
    data dawn debt decade deck degree delta desert design desk detail device diary diet
    dinner doctor dog door dragon drawer dream dress driver drum duty eagle earth echo edge
    editor effort egg elbow engine error essay estate event evening exam expert fabric face
    factor factory fact family farm farmer fashion father feather fence ferry field figure
    file film finger fire fish flag flame fleet floor flower fog folder forest fork form
    fortune fountain frame friend fruit fuel garden gate gear ghost gift glass glove goal
    gold grain grape graph grass gravel group guard guest guide guitar habit hall hammer
    hand harbor hat hazard head heart helmet hero hill history hobby hole honey hook horizon
    horse hotel hour house hunter idea image index ink insect island item jacket jar jewel
    job journal journey judge juice kernel kettle key kitchen kite knee knife label ladder
    lake lamp land lantern laptop lawyer layer leader leaf ledger lemon lesson letter level
    library light limit line lion list lobby lock log machine magnet manner map marble
    market mask match meadow meal medal member memory mentor message metal method mirror
    model moment monitor month moon morning motor mountain mouse museum music nail name
    needle nerve network night noise note notice number nurse ocean office oil onion orange
    orbit orchard order orchid owner packet page paint palace panel paper parcel parent park
    party passage path patient pattern pebble pencil pepper period permit person phone piano
    picture piece pilot pipe pixel planet plant plate pocket poem poet point policy pond
    port portrait post potato powder power press price printer prison problem process
    product profile project proof pump puzzle quarry quartz queen query question queue
    rabbit radio rail rain range rate reader reason record region report result ribbon rice
    river road robot rock roof room root rope route rule runner sail salt sample sand
    satellite scale scene school science screen script sea season seat second secret sector
    seed sensor server shadow shape sheep shelf shell shield ship shirt shoe shop shore
    signal silver singer sister skill sky slope smoke snow socket soil soldier song sound
    source space spark speaker spider spirit spoon spring square stage stair star station
    statue steam steel stone storm story stream street student studio subject sugar summer
    sun supply surface switch symbol system table tablet tail target task teacher team
    temple tent term test theory thread ticket tide tiger timber token tool tooth topic
    torch tower town track trade trail train tree trial tribe truck trumpet tunnel turtle
    uncle union unit valley value van vessel village violin visitor voice volume voyage
    wagon wall wallet warden watch water wave wealth weather wheel whistle window wing
    winter wire witness wolf wood worker world writer yard year zone
""")

ADJECTIVES = _words("""
    able active actual amber ancient angry anxious awkward bare basic bitter blank bold brave
    brief bright brisk broad broken busy calm careful casual central certain cheap clean
    clear clever close cloudy cold common complex cool correct crisp cruel curious damp
    dark dear decent deep dense direct distant dry dull dusty eager early easy empty equal
    exact extra faint fair false familiar famous fast fierce final fine firm flat fond
    foreign formal former fragile free fresh friendly full gentle giant glad global golden
    good grand grateful great green grey gross handy happy hard harsh heavy hidden high
    hollow honest huge humble hungry idle immense initial inner keen kind large late lazy
    lean legal level light likely linear little lively local lone long loose loud lovely
    loyal lucky main major manual marine mellow mental mild minor modern modest narrow
    nearby neat nervous new nice noble noisy normal novel odd open orange ordinary outer
    pale patient plain pleasant polite poor precise pretty prime private proper proud
    public pure quick quiet rapid rare raw ready real recent regular remote rich rigid
    rough round royal rural rusty sacred safe scarce secure serious shallow sharp short
    shy silent silver simple single slim slow small smart smooth soft solid sore sour
    spare steady steep sticky stiff still strange strict strong sturdy subtle sudden sunny
    super sweet swift tall tender thick thin tidy tight tiny total tough tropical true
    typical uneven upper urban usual vague valid vast vital vivid warm weak wealthy weary
    wide wild wise wooden young
""")

VERBS_PAST = _words("""
    accepted added admired adopted advised allowed answered appeared arranged arrived asked
    assumed avoided balanced became began believed belonged borrowed brought built buried
    called carried caught changed chose cleaned climbed closed collected compared completed
    considered contained continued copied counted covered crossed decided delivered
    described designed destroyed developed discovered divided doubted dragged drew dropped
    earned enjoyed entered escaped examined expected explained explored faced filled found
    finished fixed followed forgot formed gathered gave guarded guided handled heard helped
    hid hoped hurried ignored imagined improved included increased invented joined judged
    kept kicked knew lifted listened lost loved managed marked measured mentioned missed
    moved noticed observed offered opened ordered owned packed painted passed planned
    played pointed polished poured praised prepared pressed printed produced promised
    protected proved pulled pushed raised reached received recorded reduced refused
    remembered repaired repeated replaced reported rescued returned revealed rolled saved
    scattered searched selected sent separated settled shared showed signed solved sorted
    spent split spread started stayed stopped stored studied suggested supported
    surprised tested thanked touched traced traded trained treated trusted turned unlocked
    used valued visited waited walked wanted warned washed watched weighed welcomed wished
    wondered worked wrapped wrote
""")

ADVERBS = _words("""
    again almost already always barely briefly carefully clearly closely eagerly easily
    entirely equally eventually exactly finally firmly freely gently gladly gradually
    happily hardly honestly lately loosely mostly nearly neatly never often openly partly
    patiently perhaps politely quickly quietly rarely rather really seldom simply slowly
    softly sometimes soon steadily still suddenly surely swiftly together twice usually
    warmly widely
""")

PREPOSITIONS = _words("""
    about above across after against along among around before behind below beneath beside
    between beyond by during for from inside into near over past through toward under
    until upon with within without
""")

DETERMINERS = _words(
    "the the the a a this that every each one another some no their our his her its"
)
PRONOUNS = _words("she he they we it someone everyone nobody")
CONJUNCTIONS = _words("and but so yet while because although since unless whereas")

VERBS_BASE = _words("""
    add apply build check clear close collect compute count create decode delete encode
    fetch filter find flush format get handle index init load lookup merge move open parse
    read refresh register remove render reset resolve run save scan select send set sort
    split start stop store sync update validate wait write
""")

# Salt tags draw from short common words: one token each in most tokenizers, so the tag's
# length in tokens stays (nearly) fixed whatever its words are.
SALT_WORDS = tuple(sorted({w for w in NOUNS + ADJECTIVES if 3 <= len(w) <= 7}))
